//! `make chaos`: live sales on the real stack, stormed by shoppers who retry
//! as real clients do, while one fault at a time is injected (Redis, Kafka,
//! PostgreSQL, processes, merchant actions); I1–I6 are checked after every
//! run through the invariant checker and the public API. Prints a table per
//! fault kind, writes JSON and a chart under `results/`, and exits non-zero
//! when a run broke an invariant, keeping its logs, seed and timeline.

mod faults;
mod nodes;
mod report;
mod run;
mod storm;

use std::path::PathBuf;

use clap::Parser;
use faults::Kind;

/// Faults during live sales; the invariants after every run.
#[derive(Parser)]
#[command(name = "flashsale-chaos")]
struct Args {
    /// Runs per fault kind.
    #[arg(long, env = "RUNS", default_value_t = 20)]
    runs: u32,
    /// The fault kinds (default: all).
    #[arg(long, env = "KINDS", value_delimiter = ',')]
    kinds: Vec<Kind>,
    /// The seed: with one run, the run's own seed (each failed run prints
    /// the line that replays it); else the seed of every run's seed.
    #[arg(long, env = "SEED")]
    seed: Option<u64>,
    /// A small sale per run (make test: each kind once).
    #[arg(long, env = "SHORT")]
    short: bool,
    /// Where reports go.
    #[arg(long, default_value = "results")]
    results: PathBuf,
}

/// A run's seed from the top seed, the kind and the index (splitmix64):
/// the same top seed replays the same runs.
fn run_seed(top: u64, kind: Kind, index: u32, runs: u32) -> u64 {
    if runs == 1 {
        return top;
    }
    let mut z = top ^ ((kind as u64) << 32) ^ u64::from(index);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let kinds = if args.kinds.is_empty() {
        Kind::ALL.to_vec()
    } else {
        args.kinds.clone()
    };
    let top = args.seed.unwrap_or_else(rand::random);
    let size = if args.short {
        run::Size {
            stock: 600,
            window_secs: 10,
            rate: 50,
        }
    } else {
        run::Size {
            stock: 2000,
            window_secs: 16,
            rate: 100,
        }
    };
    let dir = args.results.join(format!(
        "chaos-{}",
        chrono::Utc::now().format("%Y%m%d-%H%M%S")
    ));
    std::fs::create_dir_all(&dir)?;
    // A runner killed earlier (SIGKILL) may have left a rule, processes and
    // a namespace; a signal undoes this one's.
    faults::remove_leftovers();
    tokio::spawn(async {
        let (signal, status) = faults::terminated().await;
        eprintln!("chaos: {signal}; stopping the run's processes, undoing every fault");
        // The run's operators, API and consumer: nothing acts on its sale
        // once the faults are undone and its namespace goes.
        let _ = std::process::Command::new("pkill")
            .args(["-KILL", "-P", &std::process::id().to_string()])
            .status();
        faults::undo_all();
        std::process::exit(status);
    });
    eprintln!(
        "chaos: {} kinds x {} runs, seed {top}, results in {}",
        kinds.len(),
        args.runs,
        dir.display()
    );
    let mut results = Vec::new();
    let mut replays = Vec::new();
    for kind in &kinds {
        for index in 0..args.runs {
            let seed = run_seed(top, *kind, index, args.runs);
            let run_dir = dir.join(format!("{}-{index}", kind.name()));
            let result = run::run(*kind, index, seed, size, &run_dir).await;
            std::fs::write(
                run_dir.join("run.json"),
                serde_json::to_string_pretty(&result)?,
            )?;
            eprintln!(
                "chaos: {:<22} #{index:<2} {} accepted {:>4}, lost {}, oversold {}, unavailable {:.1} s ({} decided during the fault), converged {}{}",
                kind.name(),
                if result.held { "held  " } else { "BROKE " },
                result.accepted_orders,
                result.orders_lost,
                result.oversold_units,
                result.unavailable_secs,
                result.decided_during_fault,
                result
                    .converge_secs
                    .map_or("never".to_string(), |s| format!("{s:.1} s after the end")),
                result
                    .error
                    .as_deref()
                    .map_or(String::new(), |e| format!(" ({e})")),
            );
            if result.held {
                // Only a broken run's process logs are worth their space.
                for entry in std::fs::read_dir(&run_dir)?.flatten() {
                    if entry.path().extension().is_some_and(|e| e == "log") {
                        let _ = std::fs::remove_file(entry.path());
                    }
                }
            } else {
                for (id, holds, detail) in &result.invariants {
                    eprintln!("chaos:     {id} {holds:?} {detail}");
                }
                let (name, short) = (kind.name(), if args.short { " SHORT=true" } else { "" });
                let replay = format!(
                    "{name} #{index}: {}\n  replay: make chaos KINDS={name} RUNS=1 SEED={seed}{short}   (logs: {})",
                    result.why_broken(),
                    run_dir.display()
                );
                eprintln!("chaos:     {replay}");
                replays.push(replay);
            }
            results.push(result);
        }
    }
    faults::undo_all();
    let figures = report::figures(&results);
    let table = report::table(&figures);
    println!("\n{table}");
    std::fs::write(dir.join("report.txt"), &table)?;
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&serde_json::json!({
            "seed": top,
            "runsPerKind": args.runs,
            "short": args.short,
            "kinds": figures,
        }))?,
    )?;
    std::fs::write(dir.join("chaos.svg"), report::chart(&figures))?;
    println!("report: {}", dir.display());
    // The last lines are what a CI log keeps: which runs broke and how to
    // replay each, not a backtrace.
    if !replays.is_empty() {
        eprintln!("chaos: {} run(s) broke an invariant:", replays.len());
        for replay in &replays {
            eprintln!("chaos:   {replay}");
        }
        std::process::exit(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_replay_and_differ_between_runs() {
        assert_eq!(
            run_seed(42, Kind::ApiKill, 3, 1),
            42,
            "one run: its own seed"
        );
        let a = run_seed(42, Kind::ApiKill, 3, 20);
        assert_eq!(a, run_seed(42, Kind::ApiKill, 3, 20));
        assert_ne!(a, run_seed(42, Kind::ApiKill, 4, 20));
        assert_ne!(a, run_seed(42, Kind::KafkaKill, 3, 20));
    }
}
