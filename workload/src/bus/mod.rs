//! Thin adapter over Kafka (rdkafka): the one home of topic and consumer-group
//! names ([`topics`]), topic administration ([`admin`]) and consumer-group lag
//! ([`lag`]; each sale's, shared, in [`sale_lag`]), and consumers' receive
//! errors ([`receive_errors`]).

pub mod admin;
mod group_offsets;
pub mod lag;
pub mod message;
pub mod producer;
pub mod receive_errors;
pub mod sale_lag;
pub mod topics;

use rdkafka::ClientConfig;

/// How clients reach the brokers, read from a bootstrap list:
/// - `host:port,...`: in the clear;
/// - `ssl://host:port,...`: over TLS, the brokers' certificates verified
///   against the system's CAs (or `SSL_CERT_FILE`'s);
/// - `sasl_ssl://user:password@host:port,...[?mechanism=M]`: the same, with
///   a SASL login (`PLAIN` unless `M` is e.g. `SCRAM-SHA-512`).
#[derive(Debug, PartialEq, Eq)]
pub struct Brokers<'a> {
    /// `host:port,...`.
    pub servers: &'a str,
    /// librdkafka's `security.protocol`.
    pub protocol: &'static str,
    /// The SASL login: user, password, mechanism.
    pub login: Option<(&'a str, &'a str, &'a str)>,
}

impl<'a> Brokers<'a> {
    /// Reads `bootstrap` (see [`Brokers`]).
    pub fn of(bootstrap: &'a str) -> Self {
        let clear = |servers| Self {
            servers,
            protocol: "plaintext",
            login: None,
        };
        let Some((scheme, rest)) = bootstrap.split_once("://") else {
            return clear(bootstrap);
        };
        match scheme.to_ascii_lowercase().as_str() {
            "ssl" => Self {
                servers: rest,
                protocol: "ssl",
                login: None,
            },
            "sasl_ssl" => {
                // The password may hold `@`, `:` or `?`; host lists do not.
                let (userinfo, hosts) = rest.rsplit_once('@').unwrap_or(("", rest));
                let (servers, mechanism) =
                    hosts.split_once("?mechanism=").unwrap_or((hosts, "PLAIN"));
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                Self {
                    servers,
                    protocol: "sasl_ssl",
                    login: Some((user, password, mechanism)),
                }
            }
            "plaintext" => clear(rest),
            // librdkafka names what it does not know.
            _ => clear(bootstrap),
        }
    }
}

/// A client configuration for `bootstrap` ([`Brokers`]) with the settings
/// every FlashSale client shares.
pub fn client_config(bootstrap: &str) -> ClientConfig {
    let brokers = Brokers::of(bootstrap);
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers.servers)
        .set("security.protocol", brokers.protocol)
        .set("client.id", "flashsale")
        // Fail fast when the broker is gone: callers decide what to retry.
        .set("socket.connection.setup.timeout.ms", "3000")
        // And find it again within about a second once it is back (the
        // default backoff grows to 10 s, +50 % jitter: an API kept refusing
        // and an operator kept Degraded that long after the broker returned).
        .set("reconnect.backoff.max.ms", "1000")
        .set("log_level", "4");
    if let Some((user, password, mechanism)) = brokers.login {
        config
            .set("sasl.mechanism", mechanism)
            .set("sasl.username", user)
            .set("sasl.password", password);
    }
    config
}

#[cfg(test)]
mod tests {
    use super::Brokers;

    #[test]
    fn bootstrap_table() {
        let cases = [
            ("k:9092", "k:9092", "plaintext", None),
            ("a:1,b:2", "a:1,b:2", "plaintext", None),
            ("plaintext://a:1", "a:1", "plaintext", None),
            ("ssl://a:9093,b:9093", "a:9093,b:9093", "ssl", None),
            ("SSL://a:9093", "a:9093", "ssl", None),
            (
                "sasl_ssl://shop:p@ss:w?rd@a:9096,b:9096",
                "a:9096,b:9096",
                "sasl_ssl",
                Some(("shop", "p@ss:w?rd", "PLAIN")),
            ),
            (
                "sasl_ssl://shop:pw@a:9096?mechanism=SCRAM-SHA-512",
                "a:9096",
                "sasl_ssl",
                Some(("shop", "pw", "SCRAM-SHA-512")),
            ),
        ];
        for (bootstrap, servers, protocol, login) in cases {
            assert_eq!(
                Brokers::of(bootstrap),
                Brokers {
                    servers,
                    protocol,
                    login
                },
                "{bootstrap}"
            );
        }
    }
}
