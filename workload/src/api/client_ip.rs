//! The client's address, for the per-IP limit: the TCP peer, unless the peer
//! is a trusted proxy (an ingress, a load balancer), whose `X-Forwarded-For`
//! then names the client. Only trusted hops are believed: a client that
//! writes the header itself changes nothing.

use std::net::IpAddr;

use ipnet::IpNet;

/// The proxies whose `X-Forwarded-For` is believed (none by default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

/// A trusted-proxy entry that is neither an address nor a CIDR block.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not an IP address or CIDR block (e.g. 10.0.0.0/8)")]
pub struct BadProxy(String);

impl std::str::FromStr for TrustedProxies {
    type Err = BadProxy;

    /// A comma-separated list of addresses and CIDR blocks.
    fn from_str(list: &str) -> Result<Self, BadProxy> {
        list.split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| BadProxy(entry.to_string()))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

impl TrustedProxies {
    fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client behind `peer`, given the `X-Forwarded-For` values in the
    /// order received: walking from the nearest hop outwards, the first
    /// address that is not a trusted proxy. An entry that does not parse
    /// ends the walk at the last address known good; a chain of trusted
    /// proxies only names its first.
    pub fn client_ip<'a>(
        &self,
        peer: IpAddr,
        forwarded_for: impl DoubleEndedIterator<Item = &'a str>,
    ) -> IpAddr {
        let mut client = peer;
        if !self.trusts(peer) {
            return client;
        }
        let hops: Vec<&str> = forwarded_for.flat_map(|v| v.split(',')).collect();
        for hop in hops.into_iter().rev() {
            match hop.trim().parse::<IpAddr>() {
                Ok(ip) => {
                    client = ip;
                    if !self.trusts(ip) {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_client_behind_trusted_proxies_table() {
        let trusted: TrustedProxies = "10.0.0.0/8, 192.168.1.1".parse().unwrap();
        let cases: Vec<(&str, &str, Vec<&str>, &str)> = vec![
            (
                "an untrusted peer's header is ignored",
                "203.0.113.9",
                vec!["198.51.100.1"],
                "203.0.113.9",
            ),
            (
                "a trusted peer without the header",
                "10.1.2.3",
                vec![],
                "10.1.2.3",
            ),
            (
                "the ingress names the client",
                "10.1.2.3",
                vec!["198.51.100.1"],
                "198.51.100.1",
            ),
            (
                "a client's own entries left of the nearest untrusted hop are ignored",
                "10.1.2.3",
                vec!["1.1.1.1, 198.51.100.1"],
                "198.51.100.1",
            ),
            (
                "a chain of trusted proxies is walked",
                "10.1.2.3",
                vec!["198.51.100.1, 192.168.1.1", "10.9.9.9"],
                "198.51.100.1",
            ),
            (
                "garbage stops at the last good hop",
                "10.1.2.3",
                vec!["198.51.100.1, junk, 10.5.5.5"],
                "10.5.5.5",
            ),
            (
                "all trusted: the first",
                "10.1.2.3",
                vec!["10.4.4.4, 10.5.5.5"],
                "10.4.4.4",
            ),
            ("IPv6", "10.1.2.3", vec!["2001:db8::7"], "2001:db8::7"),
        ];
        for (what, peer, header, client) in cases {
            assert_eq!(
                trusted.client_ip(ip(peer), header.into_iter()),
                ip(client),
                "{what}"
            );
        }
    }

    #[test]
    fn no_trusted_proxies_means_the_peer() {
        let none = TrustedProxies::default();
        assert_eq!(
            none.client_ip(ip("127.0.0.1"), ["198.51.100.1"].into_iter()),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn bad_entries_are_refused_by_name() {
        let error = "10.0.0.0/8,ingress".parse::<TrustedProxies>().unwrap_err();
        assert!(error.to_string().contains("\"ingress\""), "{error}");
        assert_eq!(
            "".parse::<TrustedProxies>().unwrap(),
            TrustedProxies::default()
        );
    }
}
