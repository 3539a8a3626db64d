//! A headless Chromium driven over WebDriver (Debian's `chromium` and
//! `chromium-driver`, which `make test` installs): the sale page's tests and
//! the demo's screenshots. Each browser has its own chromedriver on a port
//! of its own, killed with it.

use std::os::unix::process::CommandExt;
use std::time::Duration;

use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;

use crate::procs::Proc;

/// Where Debian puts them.
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// A phone-sized headless Chromium.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Proc,
}

impl Drop for Browser {
    /// SIGKILL to chromedriver's whole group (the browser processes too);
    /// `Proc` then reaps chromedriver.
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.pid())])
            .status();
    }
}

impl Browser {
    /// Starts chromedriver and a browser session; a missing package fails
    /// with what to install.
    pub async fn start() -> Result<Self, String> {
        for binary in [CHROMEDRIVER, CHROMIUM] {
            if !std::path::Path::new(binary).exists() {
                return Err(format!(
                    "{binary} is missing: apt-get install chromium chromium-driver (make test installs them)"
                ));
            }
        }
        let port = free_port()?;
        let mut command = std::process::Command::new(CHROMEDRIVER);
        // Its own process group: the browsers it starts go with it, even
        // when a test panics before `close`.
        command.arg(format!("--port={port}")).process_group(0);
        let log = crate::run_dir().join("logs").join("chromedriver.log");
        let driver = Proc::start(&log, command).map_err(|e| format!("chromedriver: {e}"))?;
        let url = format!("http://127.0.0.1:{port}");
        let mut capabilities = Capabilities::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": CHROMIUM,
                // Root in a container: no sandbox. A phone's viewport.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=412,915"],
            }),
        );
        let mut last = String::new();
        for _ in 0..100 {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Ok(Self { client, driver });
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!(
            "no browser session from chromedriver at {url}: {last}"
        ))
    }

    /// The element whose `data-testid` is `id`.
    pub async fn by_test_id(&self, id: &str) -> Result<fantoccini::elements::Element, String> {
        self.client
            .find(Locator::Css(&format!("[data-testid=\"{id}\"]")))
            .await
            .map_err(|e| format!("data-testid {id}: {e}"))
    }

    /// Types `text` into the element `css` selects.
    pub async fn type_into(&self, css: &str, text: &str) -> Result<(), String> {
        let element = self
            .client
            .find(Locator::Css(css))
            .await
            .map_err(|e| format!("{css}: {e}"))?;
        element
            .send_keys(text)
            .await
            .map_err(|e| format!("{css}: {e}"))
    }

    /// Saves a PNG of the viewport to `path`.
    pub async fn screenshot(&self, path: &std::path::Path) -> Result<(), String> {
        let png = self.client.screenshot().await.map_err(|e| e.to_string())?;
        std::fs::write(path, png).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Ends the session (the browser exits; chromedriver is killed on drop).
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}
