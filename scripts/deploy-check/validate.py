"""Validates manifests that `helm template` rendered from deploy/helm/idemgate, offline.

    python3 validate.py --modules NODE_MODULES --alerts deploy/prometheus/alerts.yml \
        --configs OUT_DIR LABEL=FILE[:KIND,KIND...] ...

Called by scripts/check-deploy.sh, with kubernetes-validate (PyPI; it bundles the
Kubernetes JSON schemas) on PYTHONPATH. For each rendered file:

- every core Kubernetes object is validated in strict mode (unknown fields refused)
  against the schemas of the oldest Kubernetes the chart supports and of the newest one
  kubernetes-validate bundles;
- every custom resource (PodMonitor, PrometheusRule, ScaledObject) goes to
  validate-crds.mjs, which checks it against its CRD's schema; those schemas let unknown
  fields through, so the fields the chart writes are checked here by name, and so are the
  facts that tie the objects together (selectors, ports, names, the alert rules);
- a kind that neither knows fails;
- the kinds listed after the file name must be there;
- the ConfigMap's idemgate.toml is written to OUT_DIR/LABEL.toml and the container's
  environment to OUT_DIR/LABEL.env, for `idemgate check`.

Exits 1 with every problem listed.
"""

import argparse
import json
import os
import subprocess
import sys

import kubernetes_validate
import yaml

# Chart.yaml's kubeVersion floor, and the newest schemas kubernetes-validate carries.
OLDEST = "1.27.0"
NEWEST = kubernetes_validate.latest_version()

CRDS = {
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("keda.sh/v1alpha1", "ScaledObject"),
}

# The fields the chart writes in custom resources, by where they are: the CRD schemas
# accept any other name silently, so a typo would pass them.
KNOWN_FIELDS = {
    "PodMonitor.spec": {"selector", "podMetricsEndpoints", "jobLabel", "namespaceSelector"},
    "PodMonitor.spec.podMetricsEndpoints[]": {"port", "path", "interval", "relabelings"},
    "PrometheusRule.spec": {"groups"},
    "ScaledObject.spec": {
        "scaleTargetRef", "minReplicaCount", "maxReplicaCount", "pollingInterval",
        "cooldownPeriod", "triggers",
    },
    "ScaledObject.spec.triggers[]": {"type", "metadata", "authenticationRef"},
    "ScaledObject.spec.triggers[].metadata": {
        "bootstrapServers", "consumerGroup", "topic", "lagThreshold", "allowIdleConsumers",
    },
}


class Problems:
    def __init__(self):
        self.items = []

    def add(self, where, what):
        self.items.append(f"{where}: {what}")
        print(f"FAIL {where}: {what}")


def unknown_fields(problems, where, key, mapping):
    extra = set(mapping or {}) - KNOWN_FIELDS[key]
    if extra:
        problems.add(where, f"{key} has fields the chart is not known to write: {sorted(extra)}")


def check_links(problems, label, docs, alerts):
    """What ties the rendered objects together, beyond each one's schema."""
    by_kind = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    deployments = by_kind.get("Deployment", [])
    if len(deployments) != 1:
        problems.add(label, f"expected one Deployment, found {len(deployments)}")
        return
    deployment = deployments[0]
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"].get("labels", {})
    containers = pod["spec"]["containers"]
    ports = {p.get("name") for c in containers for p in c.get("ports", [])}
    idemgate = containers[0]
    where = f"{label}: Deployment"
    if idemgate.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/healthz":
        problems.add(where, "liveness probe is not GET /healthz")
    if idemgate.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/readyz":
        problems.add(where, "readiness probe is not GET /readyz")
    for name, mount in (("config", "/etc/idemgate"),):
        if not any(m["name"] == name and m["mountPath"] == mount for m in idemgate.get("volumeMounts", [])):
            problems.add(where, f"volume {name} is not mounted at {mount}")
    selector = deployment["spec"]["selector"]["matchLabels"]
    if any(pod_labels.get(k) != v for k, v in selector.items()):
        problems.add(where, "its selector does not match its own pod labels")

    for pdb in by_kind.get("PodDisruptionBudget", []):
        if pdb["spec"]["selector"]["matchLabels"] != selector:
            problems.add(f"{label}: PodDisruptionBudget", "selects other pods than the Deployment's")

    for monitor in by_kind.get("PodMonitor", []):
        where = f"{label}: PodMonitor"
        spec = monitor["spec"]
        unknown_fields(problems, where, "PodMonitor.spec", spec)
        if any(pod_labels.get(k) != v for k, v in spec["selector"]["matchLabels"].items()):
            problems.add(where, "its selector does not match the Deployment's pods")
        for endpoint in spec["podMetricsEndpoints"]:
            unknown_fields(problems, where, "PodMonitor.spec.podMetricsEndpoints[]", endpoint)
            if endpoint.get("port") not in ports:
                problems.add(where, f"port {endpoint.get('port')!r} is not a container port ({sorted(ports)})")
            jobs = [r.get("replacement") for r in endpoint.get("relabelings", []) if r.get("targetLabel") == "job"]
            if jobs != ["idemgate"]:
                problems.add(where, f"job label is {jobs}, but alerts.yml selects job=\"idemgate\"")

    for rule in by_kind.get("PrometheusRule", []):
        where = f"{label}: PrometheusRule"
        unknown_fields(problems, where, "PrometheusRule.spec", rule["spec"])
        if rule["spec"].get("groups") != alerts["groups"]:
            problems.add(where, "its groups differ from deploy/prometheus/alerts.yml")

    for scaled in by_kind.get("ScaledObject", []):
        where = f"{label}: ScaledObject"
        spec = scaled["spec"]
        unknown_fields(problems, where, "ScaledObject.spec", spec)
        for trigger in spec["triggers"]:
            unknown_fields(problems, where, "ScaledObject.spec.triggers[]", trigger)
            unknown_fields(problems, where, "ScaledObject.spec.triggers[].metadata", trigger.get("metadata"))
        if spec["scaleTargetRef"]["name"] != deployment["metadata"]["name"]:
            problems.add(where, "scaleTargetRef does not name the Deployment")
        if "replicas" in deployment["spec"]:
            problems.add(where, "the Deployment sets replicas too: KEDA and Helm would fight over them")
        if not 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]:
            problems.add(where, "minReplicaCount is not within 1..maxReplicaCount")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--modules", required=True, help="node_modules with the CRD models")
    parser.add_argument("--alerts", required=True)
    parser.add_argument("--configs", required=True, help="where LABEL.toml files go")
    parser.add_argument("files", nargs="+", help="LABEL=FILE[:KIND,KIND...]")
    args = parser.parse_args()
    with open(args.alerts) as f:
        alerts = yaml.safe_load(f)
    problems = Problems()
    custom = []
    for spec in args.files:
        label, _, rest = spec.partition("=")
        path, _, expected = rest.partition(":")
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        seen = set()
        for doc in docs:
            ident = (doc.get("apiVersion"), doc.get("kind"))
            name = (doc.get("metadata") or {}).get("name")
            where = f"{label}: {ident[1]} {name}"
            if None in ident or not name:
                problems.add(where, "apiVersion, kind or metadata.name missing")
                continue
            if (ident[1], name) in seen:
                problems.add(where, "rendered twice")
            seen.add((ident[1], name))
            if ident in CRDS:
                custom.append({"source": label, "resource": doc})
                continue
            for version in (OLDEST, NEWEST):
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.SchemaNotFoundError:
                    problems.add(where, f"no schema for {ident[0]} {ident[1]} in Kubernetes {version}")
                    break
                except kubernetes_validate.ValidationError as error:
                    path_ = ".".join(str(p) for p in error.path)
                    problems.add(where, f"Kubernetes {version} schema: {path_}: {error.message}")
                else:
                    print(f"ok   {where} (Kubernetes {version} schema, strict)")
        kinds = {k for k, _ in seen}
        for kind in filter(None, expected.split(",")):
            if kind not in kinds:
                problems.add(label, f"no {kind} rendered")
        try:
            check_links(problems, label, docs, alerts)
        except (KeyError, TypeError, IndexError, AttributeError) as error:
            # A shape the schemas should have refused (see their lines): said, not raised.
            problems.add(label, f"cannot check how the objects fit together: {error!r}")
        maps = [d for d in docs if d.get("kind") == "ConfigMap" and "idemgate.toml" in d.get("data", {})]
        if len(maps) != 1:
            problems.add(label, f"expected one ConfigMap with idemgate.toml, found {len(maps)}")
        else:
            with open(os.path.join(args.configs, f"{label}.toml"), "w") as f:
                f.write(maps[0]["data"]["idemgate.toml"])
        # The container's environment, a Secret's value stood in for by a placeholder:
        # `idemgate check` loads the config with it and nothing else, so a ${VAR} that no
        # env entry sets fails there as it would in the pod.
        with open(os.path.join(args.configs, f"{label}.env"), "w") as f:
            for doc in docs:
                if doc.get("kind") != "Deployment":
                    continue
                for entry in doc["spec"]["template"]["spec"]["containers"][0].get("env", []):
                    value = entry.get("value", "placeholder-from-a-secret")
                    f.write(f"{entry['name']}={value}\n")
    if custom:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "validate-crds.mjs")
        result = subprocess.run(["node", script, args.modules], input=json.dumps(custom), text=True)
        if result.returncode != 0:
            problems.items.append("custom resources: see the FAIL lines above")
    if problems.items:
        print(f"{len(problems.items)} problem(s) in the rendered manifests", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
