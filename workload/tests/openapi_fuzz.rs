//! schemathesis over `/openapi.json` against the running API (Redis,
//! PostgreSQL, Kafka, a live sale, JWT shoppers): every check, thousands of
//! generated requests, no server error, every answer as the document says.

mod common;

use std::process::Stdio;

use common::{JWT_SECRET, LiveSale};
use flashsale_testkit as stack;

/// At least this many generated requests (the issue asks for 2,000).
const MIN_TEST_CASES: u64 = 2000;

/// The number after "Test cases:" in schemathesis's summary (on the line
/// after the label).
fn test_cases(summary: &str) -> Option<u64> {
    let after = &summary[summary.find("Test cases:")? + "Test cases:".len()..];
    let digits: String = after
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[test]
fn test_cases_are_read_from_the_summary() {
    let summary = "Test Phases\n...\nTest cases:\n  5523 generated, 5523 passed\n";
    assert_eq!(test_cases(summary), Some(5523));
    assert_eq!(test_cases("no summary"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_answer_off_the_document() {
    common::init_logs();
    // Stock and a per-shopper limit that leave most valid purchases a 202.
    let sale = LiveSale::start_with(common::redis_cluster(), 1_000_000, 4, 1000, |options| {
        options.jwt = true;
    })
    .await;
    let dir = stack::run_dir()
        .join("openapi-fuzz")
        .join(stack::unique_name("run"));
    std::fs::create_dir_all(&dir).unwrap();
    // Every `{sale}` is the live sale's name, so purchases reach the store.
    // Invalid data may also be refused as too large (413), past the body
    // limit; the rest of the list is schemathesis's default.
    std::fs::write(
        dir.join("schemathesis.toml"),
        format!(
            "[parameters]\n\"path.sale\" = {:?}\n\n\
             [checks.negative_data_rejection]\n\
             expected-statuses = [\"400\", \"401\", \"403\", \"404\", \"405\", \"406\", \"409\", \"413\", \"415\", \"422\", \"428\", \"429\", \"5xx\"]\n",
            sale.config.sale.name
        ),
    )
    .unwrap();
    let seed = std::env::var("FLASHSALE_FUZZ_SEED").unwrap_or_else(|_| "1".into());
    let bearer = common::token("fuzz-shopper", 3600, JWT_SECRET);
    let st = stack::schemathesis();
    let output = tokio::process::Command::new(&st)
        .current_dir(&dir)
        .args(["--no-color", "--config-file", "schemathesis.toml", "run"])
        .arg(format!("{}/openapi.json", sale.api.url))
        .args(["--checks", "all", "--max-examples", "500", "--seed", &seed])
        // One worker: with two, CPython 3.11 crashes inside Hypothesis
        // ("AST constructor recursion depth mismatch", a parser race).
        .args(["--workers", "1"])
        .arg("--header")
        .arg(format!("Authorization: Bearer {bearer}"))
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "schemathesis at {} did not run ({e}): {}",
                st.display(),
                stack::START_HINT
            )
        });
    let summary = String::from_utf8_lossy(&output.stdout);
    std::fs::write(dir.join("output.txt"), summary.as_bytes()).unwrap();
    println!("{summary}");
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "schemathesis found failures (seed {seed}; its output is in {})",
        dir.display()
    );
    let cases = test_cases(&summary).expect("schemathesis printed no test case count");
    assert!(
        cases >= MIN_TEST_CASES,
        "only {cases} generated requests, want {MIN_TEST_CASES}"
    );
}
