//! `sluice-bench-redis` as a process: its command line, and a Redis that
//! does not answer. (Loading a real Redis is bench/harness.py's job: the
//! test machines have no redis-server.)

use std::process::Command;

fn bench_redis(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice-bench-redis"))
        .args(args)
        .output()
        .expect("sluice-bench-redis runs")
}

#[test]
fn help_lists_the_redis_targets_and_the_load_flags_of_sluice_bench() {
    let out = bench_redis(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "redis-zset",
        "redis-incr",
        "redis-bucket",
        "--redis",
        "--config",
        "--concurrency",
        "--connections",
        "--rate",
        "--dist",
        "--hot-keys",
        "--hot-share",
        "--policy",
        "--json",
    ] {
        assert!(help.contains(flag), "no {flag} in\n{help}");
    }
}

#[test]
fn a_redis_that_does_not_answer_is_an_error_before_any_load() {
    // Port 1 on loopback: nothing listens there.
    let out = bench_redis(&[
        "--target",
        "redis-incr",
        "--redis",
        "redis://127.0.0.1:1/",
        "-n",
        "10",
        "--json",
        "-q",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("sluice-bench-redis: cannot connect to Redis at redis://127.0.0.1:1/"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "no report without a load");
}

#[test]
fn a_policy_missing_from_the_config_is_refused() {
    let out = bench_redis(&["--target", "redis-zset", "--policy", "nope", "-n", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no policy \"nope\""), "{err}");
}
