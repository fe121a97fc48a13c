//! What `idemgate run` refuses before it joins the group (docs/design.md
//! §10), on the brokers' own answers, as `idemgate check` reports them: an
//! input topic the brokers do not have (nothing would ever read that
//! stream), and an output topic whose `max.message.bytes` is below what
//! the stream lets through (its outputs would be refused at produce time).
//! Each refusal names the stream and the field.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::executor::block_on;
use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};

use idemgate_testkit::kafka::{admin, create_topics, Topics};
use idemgate_testkit::{env, kafka_brokers, say, unique};

use super::process::GateConfig;

/// Runs `idemgate run` on `toml` and waits (up to a minute) for it to
/// exit; its status and stderr. A run that does not exit fails the test.
fn run_refused(test: &str, toml: &str) -> String {
    let path = std::env::temp_dir().join(format!("idemgate-start-{}.toml", unique(test)));
    std::fs::write(&path, toml).expect("writing the config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["run", "--config"])
        .arg(&path)
        .env_remove("IDEMGATE_KAFKA_BROKERS")
        .env_remove("IDEMGATE_REDIS_URL")
        .env_remove("IDEMGATE_REDIS_NODES")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running idemgate run");
    let until = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("idemgate run did not refuse the config within 60s");
        }
        // Waiting on the process, which waits on the brokers' answers.
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    let _ = std::fs::remove_file(&path);
    say(test, format!("exit {status}: {stderr}"));
    assert!(!status.success(), "run started on a config it must refuse");
    stderr
}

#[test]
fn run_refuses_an_input_topic_the_brokers_do_not_have_naming_the_stream() {
    const TEST: &str = "start-missing-input";
    let topics = Topics::named(TEST, 1, 1);
    create_topics(
        &kafka_brokers(),
        &[(topics.clean.as_str(), 1), (topics.audit.as_str(), 1)],
    );
    let config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    let stderr = run_refused(TEST, &config.toml());
    assert!(
        stderr.contains("stream \"bank\", streams[0].inputs")
            && stderr.contains(&topics.input)
            && stderr.contains("not on the brokers"),
        "{stderr}"
    );
}

#[test]
fn run_refuses_an_output_topic_too_small_for_the_streams_records_naming_the_field() {
    const TEST: &str = "start-small-output";
    let brokers = kafka_brokers();
    let topics = Topics::named(TEST, 1, 1);
    create_topics(
        &brokers,
        &[(topics.input.as_str(), 1), (topics.clean.as_str(), 1)],
    );
    // The audit topic takes 200,000 bytes at most; the stream lets 900 KiB
    // records through (the default `max_record_bytes`).
    let audit = NewTopic::new(&topics.audit, 1, TopicReplication::Fixed(1))
        .set("max.message.bytes", "200000");
    let created = block_on(admin(&brokers).create_topics(&[audit], &AdminOptions::new()))
        .expect("create_topics");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    let config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    let stderr = run_refused(TEST, &config.toml());
    assert!(
        stderr.contains("stream \"bank\", streams[0].max_record_bytes")
            && stderr.contains(&format!("{}'s max.message.bytes (200000)", topics.audit)),
        "{stderr}"
    );
}
