//! Helpers shared by the workload's integration tests.

use flashsale_testkit as stack;
use sqlx::PgPool;

/// A new, migrated database on the stack's PostgreSQL, so tests never share rows.
pub async fn fresh_database() -> PgPool {
    let url = stack::database_url();
    let admin = flashsale_workload::orders::connect(&url, 1)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PostgreSQL at {url} is not answering ({e}): {}",
                stack::START_HINT
            )
        });
    let name = stack::unique_name("t").replace('-', "_");
    // The name is ours (letters, digits, underscores), never user input.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await
        .unwrap();
    let (server, _) = url.rsplit_once('/').unwrap();
    let pool = flashsale_workload::orders::connect(&format!("{server}/{name}"), 10)
        .await
        .unwrap();
    flashsale_workload::orders::migrate(&pool).await.unwrap();
    pool
}
