//! Where a webhook may be sent. A URL is parsed as the runtime's `fetch` parses it
//! (the WHATWG URL standard, which the `url` crate implements), so what is checked
//! when a subject is written is what is fetched at run time. Then the target must
//! not be this machine, a private or otherwise non-public network, a local name, or
//! the Worker itself, unless `ALLOW_PRIVATE_TARGETS=true` (local development against
//! a sink on 127.0.0.1). The Worker itself (the request's host, and every name in
//! `OWN_HOSTNAMES`) is refused whatever the setting.
//!
//! A Worker cannot resolve DNS, so a public name that resolves to a private address
//! passes here; what the platform does then is documented in docs/guides/security.md
//! ("Security model"). IP literals are caught in every notation the parser accepts
//! (`127.1`, `2130706433`, `0x7f.0.0.1`, `[::ffff:127.0.0.1]`...), because it
//! normalises them to one address before this module looks.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

/// Longest webhook URL accepted.
pub const MAX_URL_BYTES: usize = 2_048;

/// What the deployment allows, and what the Worker knows about itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TargetPolicy<'a> {
    /// `ALLOW_PRIVATE_TARGETS`: private addresses and local names are allowed.
    pub allow_private: bool,
    /// The Worker's own `host:port` (from the URL of the request being served), when
    /// known: a webhook must not call the Worker itself, whatever the setting.
    pub own_host: Option<&'a str>,
    /// `OWN_HOSTNAMES`: every name the Worker answers at (custom domains, its
    /// `*.workers.dev` name), lowercase, refused on any port. Unlike `own_host` it
    /// is known at run time and covers the names a request did not come in on.
    pub own_hostnames: &'a [String],
    /// The service bindings a `service` item may name (`jobs::service`): listed in
    /// `SERVICE_BINDINGS` and bound to this Worker.
    pub services: &'a [String],
}

impl TargetPolicy<'static> {
    /// A deployment's default: public targets only, nothing known of itself.
    pub const PUBLIC: TargetPolicy<'static> = TargetPolicy {
        allow_private: false,
        own_host: None,
        own_hostnames: &[],
        services: &[],
    };
    /// `ALLOW_PRIVATE_TARGETS=true` (local development), nothing else known.
    pub const LOCAL: TargetPolicy<'static> = TargetPolicy {
        allow_private: true,
        ..TargetPolicy::PUBLIC
    };
}

/// Why a URL is not a webhook target. The messages name the URL's part and the
/// rule; they end up in 400 answers and in `last_error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetError {
    TooLong(usize),
    /// Whitespace or control characters, which the URL parser would silently drop.
    Whitespace,
    /// Not `http://` or `https://` followed by a host.
    Scheme,
    /// The URL parser refused it (the parser's reason).
    Invalid(String),
    UserInfo,
    PortZero,
    /// A private, loopback, link-local... address or a local name.
    Private {
        host: String,
        why: &'static str,
    },
    OwnHost(String),
    /// One of `OWN_HOSTNAMES`.
    OwnHostname(String),
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetError::TooLong(n) => {
                write!(f, "url must be at most {MAX_URL_BYTES} bytes, got {n}")
            }
            TargetError::Whitespace => f.write_str("url must not contain whitespace or control characters"),
            TargetError::Scheme => f.write_str("url must start with http:// or https://"),
            TargetError::Invalid(why) => write!(f, "url is not a valid URL: {why}"),
            TargetError::UserInfo => {
                f.write_str("url must not carry a user name or password (user:pass@host)")
            }
            TargetError::PortZero => f.write_str("url port must be 1 to 65535"),
            TargetError::Private { host, why } => write!(
                f,
                "url host {host} is {why}; webhook targets must be public (ALLOW_PRIVATE_TARGETS=true allows it for local development)"
            ),
            TargetError::OwnHost(host) => {
                write!(f, "url host {host} is this Worker's own host")
            }
            TargetError::OwnHostname(host) => write!(
                f,
                "url host {host} is one of this Worker's own hostnames (OWN_HOSTNAMES): a webhook must not call the Worker itself"
            ),
        }
    }
}

impl TargetError {
    /// The message with the payload's field named where it says `url`
    /// (`feed_url host 10.0.0.1 is …`).
    pub fn for_field(&self, field: &str) -> String {
        let text = self.to_string();
        match text.strip_prefix("url") {
            Some(rest) => format!("{field}{rest}"),
            None => format!("{field}: {text}"),
        }
    }
}

/// Parse a webhook URL exactly as the runtime will, refusing what it would
/// silently rewrite or could never send.
pub fn parse(raw: &str) -> Result<Url, TargetError> {
    if raw.len() > MAX_URL_BYTES {
        return Err(TargetError::TooLong(raw.len()));
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(TargetError::Whitespace);
    }
    // `https:example.com` and `https:/example.com` are valid WHATWG URLs; asking
    // for the two slashes keeps stored URLs looking like what they are.
    let lower = raw.get(..8).unwrap_or(raw).to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err(TargetError::Scheme);
    }
    let url = Url::parse(raw).map_err(|e| TargetError::Invalid(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(TargetError::Scheme);
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(TargetError::UserInfo);
    }
    if url.port() == Some(0) {
        return Err(TargetError::PortZero);
    }
    Ok(url)
}

/// Whether `url` (from [`parse`]) may be called under `policy`.
pub fn check(url: &Url, policy: &TargetPolicy) -> Result<(), TargetError> {
    let host = url.host().ok_or(TargetError::Scheme)?;
    if let Some(own) = policy.own_host {
        let port = url.port_or_known_default().unwrap_or(0);
        let this = format!("{}:{port}", trim_dot(&host.to_string()));
        if this.eq_ignore_ascii_case(own.trim_end_matches('.')) {
            return Err(TargetError::OwnHost(host.to_string()));
        }
    }
    let name = trim_dot(&host.to_string()).to_ascii_lowercase();
    if policy.own_hostnames.contains(&name) {
        return Err(TargetError::OwnHostname(name));
    }
    if policy.allow_private {
        return Ok(());
    }
    let why = match &host {
        Host::Ipv4(a) => ipv4_class(*a),
        Host::Ipv6(a) => ipv6_class(*a),
        Host::Domain(name) => local_name(name),
    };
    match why {
        Some(why) => Err(TargetError::Private {
            host: host.to_string(),
            why,
        }),
        None => Ok(()),
    }
}

/// Parse and check in one step.
pub fn validate(raw: &str, policy: &TargetPolicy) -> Result<Url, TargetError> {
    let url = parse(raw)?;
    check(&url, policy)?;
    Ok(url)
}

/// [`validate`] for the URL in payload field `field`: the error names the field.
pub fn validate_field(field: &str, raw: &str, policy: &TargetPolicy) -> Result<Url, String> {
    validate(raw, policy).map_err(|e| e.for_field(field))
}

fn trim_dot(host: &str) -> &str {
    host.strip_suffix('.').unwrap_or(host)
}

/// IPv4 blocks that are not publicly routable (IANA special-purpose registry),
/// as (network, prefix length, what it is).
const IPV4_BLOCKS: &[([u8; 4], u8, &str)] = &[
    ([0, 0, 0, 0], 8, "an unspecified (\"this network\") address"),
    ([10, 0, 0, 0], 8, "a private address"),
    ([100, 64, 0, 0], 10, "a shared (carrier-grade NAT) address"),
    ([127, 0, 0, 0], 8, "a loopback address"),
    (
        [169, 254, 0, 0],
        16,
        "a link-local address (where cloud metadata services live)",
    ),
    ([172, 16, 0, 0], 12, "a private address"),
    ([192, 0, 0, 0], 24, "an IETF protocol address"),
    ([192, 0, 2, 0], 24, "a documentation address"),
    ([192, 88, 99, 0], 24, "a 6to4 relay address"),
    ([192, 168, 0, 0], 16, "a private address"),
    ([198, 18, 0, 0], 15, "a benchmarking address"),
    ([198, 51, 100, 0], 24, "a documentation address"),
    ([203, 0, 113, 0], 24, "a documentation address"),
    ([224, 0, 0, 0], 4, "a multicast address"),
    ([240, 0, 0, 0], 4, "a reserved (or broadcast) address"),
];

/// IPv6 blocks that are not publicly routable. Blocks that embed an IPv4 address
/// (mapped, translated, compatible, NAT64, 6to4) are judged by that address
/// instead ([`embedded_ipv4`]).
const IPV6_BLOCKS: &[([u16; 8], u8, &str)] = &[
    ([0, 0, 0, 0, 0, 0, 0, 0], 128, "an unspecified address"),
    ([0, 0, 0, 0, 0, 0, 0, 1], 128, "a loopback address"),
    // A network may put the IPv4 address anywhere RFC 6052 allows under a prefix
    // of /48 to /96 here, so only the /96 form's address can be told.
    (
        [0x64, 0xff9b, 1, 0, 0, 0, 0, 0],
        48,
        "a local-use NAT64 address whose IPv4 address cannot be told (only 64:ff9b:1::a.b.c.d is judged by its IPv4 address)",
    ),
    ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "a discard-only address"),
    (
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        23,
        "an IETF protocol address",
    ),
    (
        [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
        32,
        "a documentation address",
    ),
    (
        [0xfc00, 0, 0, 0, 0, 0, 0, 0],
        7,
        "a private (unique local) address",
    ),
    ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "a link-local address"),
    ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "a site-local address"),
    ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "a multicast address"),
];

fn ipv4_class(addr: Ipv4Addr) -> Option<&'static str> {
    let a = u32::from(addr);
    IPV4_BLOCKS
        .iter()
        .find(|(net, len, _)| {
            prefix_eq(
                u128::from(a),
                u128::from(u32::from_be_bytes(*net)),
                32,
                *len,
            )
        })
        .map(|(_, _, why)| *why)
}

fn ipv6_class(addr: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = embedded_ipv4(addr) {
        return ipv4_class(v4);
    }
    let a = u128::from(addr);
    IPV6_BLOCKS
        .iter()
        .find(|(net, len, _)| prefix_eq(a, u128::from(Ipv6Addr::from(*net)), 128, *len))
        .map(|(_, _, why)| *why)
}

/// The IPv4 address an IPv6 address stands for, if it is one of the forms that
/// reach IPv4 hosts: mapped `::ffff:a.b.c.d`, translated `::ffff:0:a.b.c.d`
/// (RFC 2765), compatible `::a.b.c.d` (but not `::` or `::1`), NAT64
/// `64:ff9b::a.b.c.d`, local-use NAT64 `64:ff9b:1::a.b.c.d` (RFC 8215, in its
/// /96 form; the rest of its /48 is refused whole, see [`IPV6_BLOCKS`]) and 6to4
/// `2002:aabb:ccdd::`.
fn embedded_ipv4(addr: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = addr.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low),
        [0, 0, 0, 0, 0xffff, 0, _, _] => Some(low),
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x64, 0xff9b, 1, 0, 0, 0, _, _] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// Whether the first `len` of `bits` bits of `a` and `net` agree.
fn prefix_eq(a: u128, net: u128, bits: u32, len: u8) -> bool {
    let shift = bits - u32::from(len);
    len == 0 || (a >> shift) == (net >> shift)
}

/// Names that resolve to this machine or a local network, never to a public host.
fn local_name(name: &str) -> Option<&'static str> {
    let name = trim_dot(name).to_ascii_lowercase();
    let under = |zone: &str| name == zone || name.ends_with(&format!(".{zone}"));
    if under("localhost") {
        Some("a loopback name")
    } else if under("local") || under("internal") || under("home.arpa") {
        Some("a local-network name")
    } else if !name.contains('.') {
        Some("a single-label name (resolved through local search domains)")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: TargetPolicy = TargetPolicy::PUBLIC;

    fn why(raw: &str) -> Result<(), TargetError> {
        validate(raw, &STRICT).map(|_| ())
    }

    fn private(raw: &str) -> &'static str {
        match why(raw) {
            Err(TargetError::Private { why, .. }) => why,
            other => panic!("{raw}: {other:?}"),
        }
    }

    #[test]
    fn ipv4_in_every_notation_the_parser_accepts() {
        for raw in [
            "http://127.0.0.1/",
            "http://127.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0x7f.0.0.1/",
            "http://0177.0.0.1/",
            "http://127.0.0.1.:8080/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[::127.0.0.1]/",
            "http://[64:ff9b::127.0.0.1]/",
            "http://[2002:7f00:1::]/",
        ] {
            assert_eq!(private(raw), "a loopback address", "{raw}");
        }
        assert!(private("http://169.254.169.254/").starts_with("a link-local"));
        assert!(private("http://[::ffff:169.254.169.254]/").starts_with("a link-local"));
        assert!(private("http://0/").starts_with("an unspecified"));
        assert_eq!(private("http://10.0.0.1/"), "a private address");
        assert_eq!(private("http://172.31.255.255/"), "a private address");
        assert_eq!(private("http://192.168.0.1/"), "a private address");
        assert!(private("http://100.127.0.1/").starts_with("a shared"));
        assert!(private("http://255.255.255.255/").starts_with("a reserved"));
        assert!(private("http://224.0.0.1/").starts_with("a multicast"));
    }

    #[test]
    fn ipv4_translated_and_local_use_nat64_addresses_are_judged_by_their_ipv4_address() {
        for raw in [
            "http://[::ffff:0:127.0.0.1]/",
            "http://[::ffff:0:7f00:1]/",
            "http://[64:ff9b:1::127.0.0.1]/",
            "http://[64:ff9b:1::7f00:1]/",
        ] {
            assert_eq!(private(raw), "a loopback address", "{raw}");
        }
        assert!(private("http://[::ffff:0:169.254.169.254]/").starts_with("a link-local"));
        assert!(private("http://[64:ff9b:1::169.254.169.254]/").starts_with("a link-local"));
        assert_eq!(private("http://[::ffff:0:10.0.0.1]/"), "a private address");
        assert_eq!(
            private("http://[64:ff9b:1::192.168.1.1]/"),
            "a private address"
        );
        for raw in [
            "https://[::ffff:0:8.8.8.8]/",
            "https://[64:ff9b:1::8.8.8.8]/",
        ] {
            assert_eq!(why(raw), Ok(()), "{raw}");
        }
    }

    #[test]
    fn the_rest_of_the_local_use_nat64_block_is_refused_whole() {
        // 127.0.0.1 under a /48 and a /64 prefix (RFC 6052's layouts): the low 32
        // bits alone would read 0.0.0.0 and 1.0.0.0.
        for raw in [
            "http://[64:ff9b:1:7f00:0:100::]/",
            "http://[64:ff9b:1:0:7f:0:100:0]/",
            "https://[64:ff9b:1:ffff:ffff:ffff:ffff:ffff]/",
        ] {
            assert!(
                private(raw).starts_with("a local-use NAT64 address"),
                "{raw}"
            );
        }
        // Beside it, the well-known prefix's own /96 and other 64:ff9b:: space.
        assert_eq!(why("https://[64:ff9b::8.8.8.8]/"), Ok(()));
        assert_eq!(why("https://[64:ff9b:2::8.8.8.8]/"), Ok(()));
    }

    #[test]
    fn ipv6_blocks() {
        assert_eq!(private("http://[::1]/"), "a loopback address");
        assert_eq!(private("http://[::]/"), "an unspecified address");
        assert_eq!(private("http://[fe80::1]/"), "a link-local address");
        assert!(private("http://[fd12:3456::1]/").starts_with("a private"));
        assert!(private("http://[ff02::1]/").starts_with("a multicast"));
        assert!(private("http://[2001:db8::1]/").starts_with("a documentation"));
    }

    #[test]
    fn public_addresses_pass() {
        for raw in [
            "https://93.184.215.14/",
            "https://172.32.0.1/",
            "https://100.128.0.1/",
            "https://[2606:4700::1111]/",
            "https://[::ffff:8.8.8.8]/",
            "https://[64:ff9b::8.8.8.8]/",
            "https://[2002:808:808::]/",
            "https://example.com/",
            "https://localhost.example.com/",
            "https://a.b.local.example/",
        ] {
            assert_eq!(why(raw), Ok(()), "{raw}");
        }
    }

    #[test]
    fn local_names() {
        assert_eq!(private("http://localhost/"), "a loopback name");
        assert_eq!(private("http://LocalHost./"), "a loopback name");
        assert_eq!(private("http://a.b.localhost/"), "a loopback name");
        assert_eq!(private("http://%6c%6fcalhost/"), "a loopback name");
        for raw in [
            "http://printer.local/",
            "http://metadata.google.internal/",
            "http://cron-fanout.internal/",
            "http://nas.home.arpa/",
        ] {
            assert_eq!(private(raw), "a local-network name", "{raw}");
        }
        assert!(private("http://intranet/").starts_with("a single-label"));
    }

    #[test]
    fn own_hostnames_are_refused_on_every_port_whatever_the_request_host() {
        let own = [
            "fanout.example.com".to_string(),
            "cron-fanout.acct.workers.dev".to_string(),
        ];
        let policy = TargetPolicy {
            allow_private: true,
            own_host: Some("fanout.example.com:443"),
            own_hostnames: &own,
            services: &[],
        };
        for raw in [
            "https://cron-fanout.acct.workers.dev/batches",
            "https://CRON-FANOUT.acct.workers.dev./x",
            "http://cron-fanout.acct.workers.dev:8080/x",
            "https://fanout.example.com:8443/x",
        ] {
            assert!(
                matches!(validate(raw, &policy), Err(TargetError::OwnHostname(_))),
                "{raw}"
            );
        }
        assert!(validate("https://other.acct.workers.dev/x", &policy).is_ok());
        assert!(validate("https://example.com/x", &policy).is_ok());
    }

    #[test]
    fn allow_private_allows_all_but_the_worker_itself() {
        let dev = TargetPolicy {
            allow_private: true,
            own_host: Some("127.0.0.1:8787"),
            own_hostnames: &[],
            services: &[],
        };
        assert!(validate("http://127.0.0.1:9000/hook", &dev).is_ok());
        assert!(validate("http://localhost/", &dev).is_ok());
        assert_eq!(
            validate("http://127.0.0.1:8787/subjects", &dev).map(|_| ()),
            Err(TargetError::OwnHost("127.0.0.1".into()))
        );
        let prod = TargetPolicy {
            allow_private: false,
            own_host: Some("cron-fanout.example.workers.dev:443"),
            own_hostnames: &[],
            services: &[],
        };
        for raw in [
            "https://cron-fanout.example.workers.dev/batches",
            "https://CRON-FANOUT.example.workers.dev./x",
            "https://cron-fanout.example.workers.dev:443/x",
        ] {
            assert!(
                matches!(validate(raw, &prod), Err(TargetError::OwnHost(_))),
                "{raw}"
            );
        }
        // Another port of the same name is another server.
        assert!(validate("http://cron-fanout.example.workers.dev/x", &prod).is_ok());
    }

    #[test]
    fn malformed_urls_say_what_is_wrong() {
        let err = |raw: &str| parse(raw).unwrap_err();
        assert_eq!(err("https://u:p@example.com/"), TargetError::UserInfo);
        assert_eq!(err("https://u@example.com/"), TargetError::UserInfo);
        assert_eq!(err("https://:p@example.com/"), TargetError::UserInfo);
        assert_eq!(err("https://example.com:0/"), TargetError::PortZero);
        assert!(matches!(
            err("https://example.com:65536/"),
            TargetError::Invalid(_)
        ));
        assert!(matches!(err("https://[::1/"), TargetError::Invalid(_)));
        assert_eq!(err("https://exa mple.com/"), TargetError::Whitespace);
        assert_eq!(err("https://example.com/\t"), TargetError::Whitespace);
        assert_eq!(err("ftp://example.com/"), TargetError::Scheme);
        assert_eq!(err("https:example.com"), TargetError::Scheme);
        assert_eq!(err("//example.com"), TargetError::Scheme);
        assert_eq!(err("https://"), TargetError::Invalid("empty host".into()));
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert!(matches!(err(&long), TargetError::TooLong(_)));
        // What the parser normalises is what is fetched.
        let url = parse("HTTPS://EXAMPLE.com:443/a/../b?x#y").unwrap();
        assert_eq!(url.as_str(), "https://example.com/b?x#y");
    }

    #[test]
    fn a_target_error_names_the_payload_field_it_came_from() {
        let err =
            validate_field("feed_url", "http://10.0.0.1/", &TargetPolicy::PUBLIC).unwrap_err();
        assert!(err.starts_with("feed_url host 10.0.0.1 is "), "{err}");
        assert_eq!(
            validate_field("notify_url", "ftp://x.test/", &TargetPolicy::PUBLIC).unwrap_err(),
            "notify_url must start with http:// or https://"
        );
        assert!(validate_field("feed_url", "https://example.com/", &TargetPolicy::PUBLIC).is_ok());
    }
}
