//! SOAK.md and SOAK.json: the conditions, each guarantee's fault schedule
//! as applied, its figures by stream, what must be zero and whether it is,
//! and what this machine cannot show.

use serde::Serialize;

use super::config::Guarantee;
use super::run::RunResult;
use super::store::StoreKind;
use super::SoakArgs;

#[derive(Serialize)]
pub(crate) struct Report {
    pub generated_utc: String,
    pub store: StoreKind,
    pub args: SoakArgs,
    pub seed: u64,
    pub machine: String,
    pub idemgate_commit: String,
    pub seconds: f64,
    pub runs: Vec<RunResult>,
    /// Guarantees asked for and not run, with the build's refusal.
    pub not_run: Vec<(String, String)>,
}

impl Report {
    pub fn new(
        args: &SoakArgs,
        seed: u64,
        runs: Vec<RunResult>,
        not_run: Vec<(String, String)>,
        seconds: f64,
    ) -> Report {
        Report {
            generated_utc: super::faults::utc_now(),
            store: StoreKind::parse(&args.store).unwrap_or(StoreKind::Redis),
            args: args.clone(),
            seed,
            machine: machine(),
            idemgate_commit: commit(),
            seconds,
            runs,
            not_run,
        }
    }

    /// Every must-be-zero figure that is not, by run and stream.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for run in &self.runs {
            let g = &self.run_name(run);
            if let Some(why) = &run.not_drained {
                out.push(format!("{g}: {why}"));
            }
            for fault in run.faults.iter().filter(|f| !f.landed) {
                out.push(format!(
                    "{g}: fault NOT applied as described: {}: {}",
                    fault.fault, fault.note
                ));
            }
            if run.unsettled_claims > 0 {
                out.push(format!(
                    "{g}: {} unsettled claims after the stop: {:?}",
                    run.unsettled_claims, run.unsettled_examples
                ));
            }
            for f in &run.streams {
                let s = &f.stream;
                let mut zero = |what: &str, n: usize| {
                    if n > 0 {
                        out.push(format!("{g} {s}: {what} = {n} (must be 0)"));
                    }
                };
                zero("inputs without output", f.inputs_without_output);
                zero("events missing from clean", f.events_missing_from_clean);
                zero(
                    "decisions disagreeing with the oracle",
                    f.decision_mismatches,
                );
                zero("inputs the log holds twice", f.inputs_written_twice);
                zero(
                    "inputs not read back",
                    f.records_in.saturating_sub(f.read_back),
                );
                if f.fail_mode == "closed" {
                    zero("distinct events twice in clean", f.events_twice_in_clean);
                }
                // Exactly once: a read_committed reader sees one output of
                // each input, the aborted transactions' outputs not at all.
                if run.read_committed {
                    zero("same input twice in clean", f.inputs_twice_in_clean);
                    zero("inputs with two or more outputs", f.inputs_replayed);
                    for example in f.replayed_examples.iter().take(5) {
                        out.push(format!("{g} {s}:   two outputs: {example}"));
                    }
                }
                for example in f.without_output_examples.iter().take(5) {
                    out.push(format!("{g} {s}:   no output: {example}"));
                }
                for example in f.mismatch_examples.iter().take(5) {
                    out.push(format!("{g} {s}:   {example}"));
                }
            }
        }
        out
    }

    pub fn summary(&self) -> String {
        let mut text = String::new();
        for run in &self.runs {
            let landed = run.faults.iter().filter(|f| f.landed).count();
            text.push_str(&format!(
                "{}: {landed} of {} faults applied as described; unsettled claims after the stop {}\n",
                self.run_name(run),
                run.faults.len(),
                run.unsettled_claims
            ));
            for f in &run.streams {
                text.push_str(&format!(
                    "  {}: in {}, without output {}, events {}, missing {}, events twice in clean {}, same input twice in clean {}, inputs with two outputs {}, filter false positives {}, mismatches {} of {} checked\n",
                    f.stream, f.records_in, f.inputs_without_output, f.distinct_events, f.events_missing_from_clean, f.events_twice_in_clean, f.inputs_twice_in_clean, f.inputs_replayed, f.events_lost_to_filter_false_positives, f.decision_mismatches, f.decisions_checked
                ));
            }
        }
        for (g, why) in &self.not_run {
            text.push_str(&format!("{g}: NOT RUN ({why})\n"));
        }
        text
    }

    /// A run as the summary and failures name it.
    fn run_name(&self, run: &RunResult) -> String {
        match run.store {
            StoreKind::Redis => run.guarantee.name().to_string(),
            StoreKind::Postgres => format!("PostgreSQL {}", run.guarantee.name()),
        }
    }

    pub fn markdown(&self) -> String {
        if self.store == StoreKind::Postgres {
            return self.postgres_markdown();
        }
        let a = &self.args;
        let mut md = String::new();
        let mut line = |s: String| {
            md.push_str(&s);
            md.push('\n');
        };
        line("# idemgate: fault soak".into());
        line(String::new());
        line(format!(
            "Generated {} by `idemgate-bench soak{}` (`scripts/soak.sh` runs it) in {:.1} minutes, at commit {}. Every figure below comes from that run; regenerate rather than edit.",
            self.generated_utc,
            if a.short { " --short" } else { "" },
            self.seconds / 60.0,
            self.idemgate_commit
        ));
        line(String::new());
        line("## Conditions".into());
        line(String::new());
        line(format!("- Machine: {}. Everything shares it: three replicas (child processes, each exactly `idemgate run`), the broker (one JVM), redis-server, the soak's producer and readers; other builds may have been running beside it.", self.machine));
        line(format!(
            "- Broker: {} (KRaft, one node: broker and controller in one JVM), a fresh one per guarantee, its log on local disk under the run's directory. Its restart is a SIGKILL (a crash) and a start of the same node on the same ports and the same log, which it recovers, keeping its topics, committed offsets, groups and transaction state; the replicas keep running through it and reconnect, and the soak's own producer holds off until the broker serves metadata again.",
            self.runs.first().map_or("?".into(), |r| r.broker_version.clone()),
        ));
        line("- Replicas: a SIGKILLed replica is started again at once, as a supervisor would, while the group still counts the dead member until its 6 s session expires; under exactly-once its new producer (the same `transactional.id`) fences the dead one's open transaction. A SIGTERMed replica is started again once it has exited.".into());
        line(format!("- Redis: {}, `noeviction`, no background persistence; its restart is `SHUTDOWN SAVE` then a start from that dump (a planned restart: claims and watermarks survive). A crash without persistence loses claims and watermarks: that is store data loss, not an outage, and is not soaked here.", self.runs.first().map_or("?".into(), |r| r.store_version.clone())));
        line(format!("- Workload: {} records in all, {:.0} % bank (`bank-txn`, `mode = \"exact\"`, `fail_mode = \"closed\"`: redeliveries re-serialized at 35 % and 10 %, conflicts at 2 %, 1 % malformed, late copies of earlier events) and the rest telemetry (`payload` profile, `mode = \"tiered\"`, `fail_mode = \"open\"`, tier-1 TTL {} s, filter on Redis bitmaps: a tenth re-sent within a few records, a twentieth re-sent at the end, by then mostly known only to the filter); seed {}. {} partitions per topic, {} replicas in one group, batches of {}; written over a {:.0} s window while the faults below are applied.", a.records, a.bank_share * 100.0, a.tier1_ttl, self.seed, a.partitions, a.replicas, a.batch, a.window));
        line(format!("- Faults: the schedule below, in seconds after the soak's start, from the moment the group has formed and split every partition; a fault starts at its planned second, or once the one before has ended{}.", if a.gap > 0.0 { format!(" and {:.0} s have passed", a.gap) } else { String::new() }));
        line(super::pauses::STOPS.into());
        line(format!("- Store link: the replicas reach the store through a loopback link of the soak's own (the test kit's `Link`); its cut drops the packets both ways for {:.0} s with every socket kept open, so the replicas meet silence, not a refusal: their store timeouts and breaker are what they have. The soak's own checks reach the store directly.", a.link_cut));
        line(format!("- SIGKILL inside a seal (exactly once only): a replica is SIGTERMed and started again with its test-only fault point armed (`IDEMGATE_FAULT_AT`, action `kill`, {} passes with work skipped, so it lands mid-stream), once just after a transaction's commit (nothing settled yet: the protocol's weakest spot) and once between `send_offsets_to_transaction` and the commit; it SIGKILLs itself there, and is started again without it, as a supervisor would. Each row's outcome says whether it fired; one that did not fails the soak.", super::faults::SEAL_FAULT_SKIP));
        line("- Oracle: every record is fingerprinted by the library when it is planned; the first input of an event (its copies share its partition and come later) must be the one in clean, decided `novel`; every other copy `duplicate` (tier `exact`) or `conflict` naming that input's coordinates in `idemgate-first-seen`; malformed records `invalid` with the library's reason code; every output keeps its input's key and payload and carries the library's source hash. On the telemetry stream a copy may be a filter hit (`duplicate`, tier `filter`, no holder), and a first input suppressed that way is a tier-2 false positive, counted apart; a copy that comes after its tier-1 key expired claims the hash anew before the filter suppresses it, so a later copy names *it* as the holder (counted apart); `unverified` (fail-open) outputs pass and may double an event.".into());
        line("- Doubles: *distinct events twice in clean* counts events that reached clean through two or more inputs (another copy let through); *same input twice in clean* counts input records with two or more clean outputs (a replay of work not committed). Under exactly-once the readers are `read_committed`: they see no output of an aborted transaction, so an input with two outputs anywhere is a failure there.".into());
        line(String::new());
        for run in &self.runs {
            line(format!("## {}", run.guarantee.name()));
            line(String::new());
            run_section(&mut line, run);
        }
        for (g, why) in &self.not_run {
            line(format!("## {g}: NOT RUN"));
            line(String::new());
            line(format!("This build refuses the config it needs: `{why}`."));
            line(String::new());
        }
        line("## What this machine cannot show".into());
        line(String::new());
        line("- One broker, no replication: a broker restart here is a process restart on its own disk, not a leader failover, and `acks=all` means one replica. The restart is a crash; a controlled shutdown is not soaked: on one node it leaves every partition without a leader while the transaction coordinator still sends markers, and Apache Kafka 4.4 skips those markers as if the partitions were deleted, leaving a hanging transaction on the outputs (docs/design.md §12).".into());
        line("- A Redis crash that loses acknowledged writes (no AOF, a failover to a lagging replica) is store data loss, outside what fail-closed mode can guard; not soaked.".into());
        line("- Wall-clock time: a late re-send meets only the filter once its tier-1 key has expired; clock skew between replicas is not exercised (one machine, one clock).".into());
        md
    }

    /// A `--store postgres` run: its own sections, each with the
    /// conditions that differ from the Redis run's, for
    /// `super::postgres::splice` to put into SOAK.md.
    fn postgres_markdown(&self) -> String {
        let mut md = String::from("# idemgate: fault soak\n\n");
        let mut line = |s: String| {
            md.push_str(&s);
            md.push('\n');
        };
        for run in &self.runs {
            line(super::postgres::heading(run.guarantee.name()));
            line(String::new());
            for condition in super::postgres::conditions(self, run) {
                line(condition);
            }
            line(String::new());
            run_section(&mut line, run);
        }
        for (g, why) in &self.not_run {
            line(format!("{}: NOT RUN", super::postgres::heading(g)));
            line(String::new());
            line(format!("This build refuses the config it needs: `{why}`."));
            line(String::new());
        }
        line("## What this machine cannot show".into());
        line(String::new());
        line("- One broker, no replication; one PostgreSQL server, no standby: a restart here is a process restart on its own disk, not a failover.".into());
        md
    }
}

fn run_section(line: &mut impl FnMut(String), run: &RunResult) {
    line(format!(
        "Started {}; records written in {:.1} s, drained {:.1} s after, {:.1} s in all. Readers use `isolation.level = {}`.{}",
        run.started_utc,
        run.produce_seconds,
        run.drain_seconds,
        run.total_seconds,
        if run.read_committed { "read_committed" } else { "read_uncommitted" },
        if run.guarantee == Guarantee::ExactlyOnce {
            " Each replica has its own `transactional.id` (`soak-<n>`), kept across its restarts."
        } else {
            ""
        }
    ));
    line(String::new());
    if let Some(why) = &run.not_drained {
        line(format!(
            "**The run {why}.** The figures below are what had arrived by then."
        ));
        line(String::new());
    }
    line("| + s | UTC | fault | took s | outcome | longest stop of decisions s (stream, input partition) |".into());
    line("|--:|---|---|--:|---|--:|".into());
    for f in &run.faults {
        let pause = match &f.pause {
            Some(p) => format!("{:.1} ({} {})", p.seconds, p.stream, p.partition),
            None => "none".into(),
        };
        line(format!(
            "| {:.1} | {} | {} | {:.1} | {} | {pause} |",
            f.at_s, f.at_utc, f.fault, f.took_s, f.note
        ));
    }
    line(String::new());
    let streams = &run.streams;
    let header: Vec<String> = streams
        .iter()
        .map(|f| format!("{} ({}, fail {})", f.stream, f.mode, f.fail_mode))
        .collect();
    line(format!("| figure | {} |", header.join(" | ")));
    line(format!("|---|{}", "--:|".repeat(streams.len())));
    let row = |line: &mut dyn FnMut(String),
               name: &str,
               get: &dyn Fn(&super::verdict::Figures) -> String| {
        let cells: Vec<String> = streams.iter().map(get).collect();
        line(format!("| {name} | {} |", cells.join(" | ")));
    };
    let closed_zero = |f: &super::verdict::Figures, n: usize| {
        if f.fail_mode == "closed" {
            format!("{n} (must be 0)")
        } else {
            format!("{n} (counted: fail-open)")
        }
    };
    row(line, "records in", &|f| f.records_in.to_string());
    row(line, "read back from the input log (each once)", &|f| {
        format!("{} ({} twice)", f.read_back, f.inputs_written_twice)
    });
    row(line, "distinct events", &|f| f.distinct_events.to_string());
    row(line, "outputs", &|f| f.outputs.to_string());
    row(line, "decisions", &|f| {
        format!("{:?}", f.decisions).replace('"', "")
    });
    row(line, "inputs without an output (must be 0)", &|f| {
        f.inputs_without_output.to_string()
    });
    row(line, "events missing from clean (must be 0)", &|f| {
        f.events_missing_from_clean.to_string()
    });
    row(
        line,
        "tier-2 false positives (first copy suppressed by the filter)",
        &|f| f.events_lost_to_filter_false_positives.to_string(),
    );
    row(line, "distinct events twice in clean", &|f| {
        closed_zero(f, f.events_twice_in_clean)
    });
    // Exactly once: a read_committed reader must see each input once.
    let once = |n: usize| match run.read_committed {
        true => format!("{n} (must be 0)"),
        false => n.to_string(),
    };
    row(
        line,
        "same input twice in clean (inputs; extra copies)",
        &|f| {
            format!(
                "{}; {}",
                once(f.inputs_twice_in_clean),
                f.extra_clean_copies_of_inputs
            )
        },
    );
    row(line, "inputs with two or more outputs (replayed)", &|f| {
        once(f.inputs_replayed)
    });
    row(line, "copies suppressed by the filter", &|f| {
        f.filter_duplicates.to_string()
    });
    row(
        line,
        "copies naming an earlier copy that claimed the hash again after its tier-1 key expired",
        &|f| f.copies_naming_a_reclaim.to_string(),
    );
    if run.store == StoreKind::Postgres {
        row(
            line,
            "late re-sends claimed anew after their event's claim expired",
            &|f| f.late_copies_claimed_anew.to_string(),
        );
    }
    row(line, "decisions checked against the oracle", &|f| {
        f.decisions_checked.to_string()
    });
    row(line, "decisions disagreeing with it (must be 0)", &|f| {
        f.decision_mismatches.to_string()
    });
    line(String::new());
    line(format!(
        "{} left unsettled after the graceful stop (must be 0): {}.",
        match run.store {
            StoreKind::Redis => "Tier-1 claims",
            StoreKind::Postgres => "Live claims (rows of the claims tables)",
        },
        run.unsettled_claims
    ));
    line(String::new());
    for f in streams
        .iter()
        .filter(|f| !f.without_output_examples.is_empty())
    {
        line(format!("First inputs without an output on {} (input, kind, event, partition and offset in the log):", f.stream));
        for e in &f.without_output_examples {
            line(format!("- {e}"));
        }
        line(String::new());
    }
    for f in streams
        .iter()
        .filter(|f| run.read_committed && !f.replayed_examples.is_empty())
    {
        line(format!("First inputs with two outputs on {} (input, partition and offset in the log: each output's decision, topic, partition and offset):", f.stream));
        for e in &f.replayed_examples {
            line(format!("- {e}"));
        }
        line(String::new());
    }
    for f in streams.iter().filter(|f| !f.mismatch_examples.is_empty()) {
        line(format!("First disagreements on {}:", f.stream));
        for e in &f.mismatch_examples {
            line(format!("- {e}"));
        }
        line(String::new());
    }
    line(format!(
        "Graceful stop at the end: {}.",
        run.stops.join("; ")
    ));
    line(String::new());
    if run.unexpected_exits.is_empty() {
        line("No replica exited on its own.".into());
    } else {
        line(format!(
            "{} replica exits the soak did not ask for (a replica exits non-zero when, say, a transaction cannot commit; the soak, as its supervisor, started each again):",
            run.unexpected_exits.len()
        ));
        line(String::new());
        line("```".into());
        for e in &run.unexpected_exits {
            line(e.clone());
        }
        line("```".into());
    }
    line(String::new());
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} cores")
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
