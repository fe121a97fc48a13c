//! `scripts/demo.sh` and `scripts/install-deps.sh` as they run on a
//! user's Debian machine, with apt, dpkg and the service managers replaced
//! by stand-ins on `PATH` that record what they were asked and keep a
//! pretend package database: what gets installed, and that no service of
//! a newly installed package is left enabled or running.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// What building needs, as `install-deps.sh --build` lists it.
const BUILD: [&str; 7] = [
    "build-essential",
    "cmake",
    "pkg-config",
    "libssl-dev",
    "zlib1g-dev",
    "libsasl2-dev",
    "libcurl4-openssl-dev",
];

/// A pretend machine: `bin/` holds the stand-ins, `state/` their records.
struct Machine {
    dir: PathBuf,
}

/// The stand-ins. `installed` is the package database; apt-get adds what
/// it installs (a service package brings a dependency along);
/// `dpkg -L` lists a unit, a template unit and an init script for the two
/// service packages; `systemctl is-system-running` answers `$SYSTEMD`.
const STUBS: &[(&str, &str)] = &[
    (
        "dpkg-query",
        r#"db="$STATE/installed"; touch "$db"
case "$2" in
  '-f=${Status}') grep -qx "$3" "$db" && printf 'install ok installed' || exit 1 ;;
  *) sed 's/^/ii  /' "$db" ;;
esac"#,
    ),
    (
        "apt-get",
        r#"echo "$*" >> "$STATE/apt.log"
install=0
for a in "$@"; do
  if [[ $a == install ]]; then install=1; continue; fi
  if ((install)) && [[ $a != -* ]]; then
    echo "$a" >> "$STATE/installed"
    [[ $a == redis-server ]] && echo liblzf1 >> "$STATE/installed"
  fi
done
true"#,
    ),
    (
        "dpkg",
        r#"[[ $1 == -L ]] || exit 1
case "$2" in
  redis-server|prometheus)
    printf '/usr/bin/%s\n/lib/systemd/system/%s.service\n/lib/systemd/system/%s@.service\n/etc/init.d/%s\n' "$2" "$2" "$2" "$2" ;;
esac"#,
    ),
    (
        "systemctl",
        r#"if [[ $1 == is-system-running ]]; then echo "$SYSTEMD"; [[ $SYSTEMD == running ]]; exit; fi
echo "systemctl $*" >> "$STATE/services.log""#,
    ),
    ("service", r#"echo "service $*" >> "$STATE/services.log""#),
    (
        "update-rc.d",
        r#"echo "update-rc.d $*" >> "$STATE/services.log""#,
    ),
    ("sudo", r#"exec "$@""#),
    // demo.sh's build and run, after the install step.
    ("cargo", r#"echo "cargo $*" >> "$STATE/cargo.log""#),
];

impl Machine {
    fn new(name: &str, installed: &[&str]) -> Machine {
        let dir = std::env::temp_dir().join(format!("idemgate-deps-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["bin", "state", "home/.cargo/bin"] {
            std::fs::create_dir_all(dir.join(sub)).expect("making the pretend machine");
        }
        for (name, body) in STUBS {
            let folder = if *name == "cargo" {
                "home/.cargo/bin"
            } else {
                "bin"
            };
            let path = dir.join(folder).join(name);
            std::fs::write(&path, format!("#!/usr/bin/env bash\n{body}\n")).expect("a stub");
            make_executable(&path);
        }
        let db: String = installed.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(dir.join("state/installed"), db).expect("the package database");
        Machine { dir }
    }

    /// Runs a script of the repository on this machine.
    fn run(&self, script: &str, args: &[&str], systemd: &str) -> Output {
        let path = format!(
            "{}:{}",
            self.dir.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let output = Command::new("bash")
            .arg(Path::new(ROOT).join(script))
            .args(args)
            .env("PATH", path)
            .env("HOME", self.dir.join("home"))
            .env("STATE", self.dir.join("state"))
            .env("SYSTEMD", systemd)
            .output()
            .expect("running bash");
        println!(
            "{script} {args:?}: {}\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join("state").join(name)).unwrap_or_default()
    }

    /// The packages `apt-get install` was asked for, over every call.
    fn asked_to_install(&self) -> BTreeSet<String> {
        self.log("apt.log")
            .lines()
            .filter_map(|line| line.split_once(" install "))
            .flat_map(|(_, rest)| {
                rest.split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .filter(|a| !a.starts_with('-'))
            .collect()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut permissions = std::fs::metadata(path).expect("a stub").permissions();
    permissions.set_mode(0o755);
    std::fs::set_permissions(path, permissions).expect("chmod");
}

#[test]
fn the_demo_installs_what_building_needs_and_nothing_else() {
    let machine = Machine::new("demo", &[]);
    let out = machine.run("scripts/demo.sh", &["--transactions", "10"], "running");
    assert!(out.status.success(), "demo.sh failed");
    let asked = machine.asked_to_install();
    let build: BTreeSet<String> = BUILD.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        asked, build,
        "demo.sh installed more or less than the build packages"
    );
    assert_eq!(machine.log("services.log"), "", "demo.sh touched a service");
    assert_eq!(
        machine.log("cargo.log").trim(),
        "cargo run --release --locked -- demo --transactions 10",
        "demo.sh's run"
    );
    // Everything there: nothing installed, in well under a second.
    let again = Machine::new("demo-again", &BUILD);
    assert!(again
        .run("scripts/demo.sh", &[], "running")
        .status
        .success());
    assert_eq!(
        again.log("apt.log"),
        "",
        "demo.sh ran apt with everything present"
    );
}

#[test]
fn no_service_of_a_newly_installed_package_is_left_enabled_or_running() {
    // With systemd: each unit of the new packages disabled and stopped,
    // template units left (they have no instance); nothing of a package
    // that was there before.
    let machine = Machine::new("systemd", &["prometheus"]);
    let out = machine.run("scripts/install-deps.sh", &[], "running");
    assert!(out.status.success(), "install-deps.sh failed");
    let asked = machine.asked_to_install();
    assert!(asked.contains("redis-server"), "{asked:?}");
    assert!(
        !asked.contains("prometheus"),
        "prometheus was there: {asked:?}"
    );
    assert_eq!(
        machine.log("services.log"),
        "systemctl disable --now redis-server.service\n"
    );
    // Without systemd (containers, WSL): init scripts stopped and disabled.
    let machine = Machine::new("sysv", &[]);
    assert!(machine
        .run("scripts/install-deps.sh", &[], "offline")
        .status
        .success());
    let log = machine.log("services.log");
    for line in [
        "service redis-server stop",
        "update-rc.d redis-server disable",
        "service prometheus stop",
        "update-rc.d prometheus disable",
    ] {
        assert!(log.lines().any(|l| l == line), "missing `{line}`:\n{log}");
    }
    assert!(!log.contains("systemctl"), "{log}");
    // A service that cannot be stopped fails the install, loudly.
    let machine = Machine::new("stuck", &[]);
    std::fs::write(
        machine.dir.join("bin/service"),
        "#!/usr/bin/env bash\necho \"cannot stop $1\" >&2; exit 1\n",
    )
    .expect("a failing stub");
    let out = machine.run("scripts/install-deps.sh", &[], "offline");
    assert!(
        !out.status.success(),
        "a service left running went unnoticed"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot stop"));
    // An unknown mode is refused.
    let out = Machine::new("bad", &[]).run("scripts/install-deps.sh", &["--all"], "running");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--build"));
}
