//! The server's TLS: the serving certificate (given, or self-signed in `--cert-dir` on
//! first start and reused after, as the kubelet keeps `kubelet.crt`/`kubelet.key`), the
//! client-certificate check against `--client-ca-file`, and the user a verified client
//! certificate names (CN the user, O the groups, as Kubernetes' x509 authenticator).
//! The crypto provider and the verifier that takes any certificate are the probes'
//! HTTPS client's too, so both ends check a handshake the same way.

use anyhow::{bail, Context};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

/// Checks client certificates against `--client-ca-file`.
pub type ClientVerifier = Arc<dyn rustls::server::danger::ClientCertVerifier>;

/// The rustls server config: our certificate, and client certificates asked for when
/// there is a CA file, with the verifier to check them against it. A client without a
/// certificate, or with one the CA did not sign, is still let in (it may bring a bearer
/// token; the kubelet answers it with a 401, not a failed handshake): who it is and what
/// it may do is decided per request ([`client_user`]).
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> anyhow::Result<(rustls::ServerConfig, Option<ClientVerifier>)> {
    let provider = provider();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("parsing {}", cert.display()))?;
    if certs.is_empty() {
        bail!("{}: no certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading the private key {}", key.display()))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca)
                .with_context(|| format!("reading --client-ca-file {}", ca.display()))?
            {
                roots
                    .add(c.with_context(|| format!("parsing {}", ca.display()))?)
                    .with_context(|| format!("a CA of {}", ca.display()))?;
            }
            let hints = roots.subjects();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .allow_unauthenticated()
            .build()?;
            let asks = Arc::new(AnyCert::new(provider, hints));
            (builder.with_client_cert_verifier(asks), Some(verifier))
        }
        None => (builder.with_no_client_auth(), None),
    };
    let (builder, verifier) = builder;
    let mut cfg = builder.with_single_cert(certs, key)?;
    // HTTP/2 first, as the kubelet's Go server offers it: the apiserver streams logs to
    // a websocket client only from an HTTP/2 answer (over HTTP/1.1 its reader saw an
    // empty log). Exec, attach and port-forward are HTTP/1.1 upgrades, and clients
    // making them offer only HTTP/1.1.
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((cfg, verifier))
}

/// The crypto of every TLS end of the crustlet: ring, the one provider the workspace
/// builds rustls with.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Takes any certificate and leaves judging it to someone else: the server asks for a
/// client certificate with it and decides per request who the client is
/// ([`client_user`]); the probes' client takes any server certificate with it, as the
/// kubelet's `InsecureSkipVerify`. The handshake's signature is still checked against
/// the certificate's key, with the provider's algorithms as rustls' WebPKI verifiers do.
#[derive(Debug)]
pub struct AnyCert {
    provider: Arc<CryptoProvider>,
    /// The CA subjects a server names when it asks for a client certificate.
    hints: Vec<DistinguishedName>,
}

impl AnyCert {
    pub fn new(provider: Arc<CryptoProvider>, hints: Vec<DistinguishedName>) -> AnyCert {
        AnyCert { provider, hints }
    }
}

/// The handshake signature checks: the server's and the client's verifier traits ask for
/// them with the same three methods, which only a macro can write once for both.
macro_rules! handshake_signatures {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            let algs = &self.provider.signature_verification_algorithms;
            rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            let algs = &self.provider.signature_verification_algorithms;
            rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    };
}

impl ClientCertVerifier for AnyCert {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }
    handshake_signatures!();
}

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    handshake_signatures!();
}

/// Who a connection's client certificates say the client is: `None` without any, the
/// user when `verifier` (the CA file's) accepts the chain, an error when it does not.
pub fn client_user(
    verifier: Option<&ClientVerifier>,
    certs: Option<&[CertificateDer<'_>]>,
) -> Option<Result<(String, Vec<String>), ()>> {
    let (end, intermediates) = certs?.split_first()?;
    let Some(verifier) = verifier else {
        return Some(Err(()));
    };
    let now = UnixTime::now();
    if let Err(e) = verifier.verify_client_cert(end, intermediates, now) {
        tracing::debug!("client certificate: {e}");
        return Some(Err(()));
    }
    Some(cert_user(end).ok_or(()))
}

/// The certificate and key to serve: the flags' files, or `kubelet.crt`/`kubelet.key` in
/// the cert dir, made self-signed for the node's name and addresses if absent.
pub fn serving_files(
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
    cert_dir: &Path,
    node: &str,
    ips: &[String],
) -> anyhow::Result<(std::path::PathBuf, std::path::PathBuf)> {
    match (cert_file, key_file) {
        (Some(c), Some(k)) => return Ok((c.to_path_buf(), k.to_path_buf())),
        (None, None) => {}
        _ => bail!("--tls-cert-file and --tls-private-key-file go together"),
    }
    let cert = cert_dir.join("kubelet.crt");
    let key = cert_dir.join("kubelet.key");
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    std::fs::create_dir_all(cert_dir)
        .with_context(|| format!("creating --cert-dir {}", cert_dir.display()))?;
    let (c, k) = self_signed(node, ips)?;
    // The key first, private from the start; the certificate last, so a crash between
    // the two leaves no certificate without its key.
    write_private(&key, k.as_bytes())?;
    std::fs::write(&cert, c).with_context(|| format!("writing {}", cert.display()))?;
    tracing::info!(cert = %cert.display(), "made a self-signed serving certificate");
    Ok((cert, key))
}

fn write_private(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(data)?;
    Ok(())
}

/// A self-signed certificate for the node (PEM certificate, PEM key): its name and IPs
/// (and `localhost`) as subject alternative names, valid for a year from an hour ago, as
/// the kubelet makes its own.
pub fn self_signed(node: &str, ips: &[String]) -> anyhow::Result<(String, String)> {
    let key = rcgen::KeyPair::generate()?;
    let mut names = vec![node.to_string()];
    if node != "localhost" {
        names.push("localhost".into());
    }
    let mut params = rcgen::CertificateParams::new(names)?;
    for ip in ips.iter().map(String::as_str).chain(["127.0.0.1"]) {
        if let Ok(a) = ip.parse::<std::net::IpAddr>() {
            let san = rcgen::SanType::IpAddress(a);
            if !params.subject_alt_names.contains(&san) {
                params.subject_alt_names.push(san);
            }
        }
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("{node}@{}", now.as_second()),
    );
    let (y, m, d) = ymd(now);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    params.not_after = rcgen::date_time_ymd(y + 1, m, d);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Yesterday's date (UTC), so a clock a little behind the client's still accepts it.
fn ymd(now: k8s_openapi::jiff::Timestamp) -> (i32, u8, u8) {
    let day = now - k8s_openapi::jiff::SignedDuration::from_hours(24);
    let z = day.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
    (z.year() as i32, z.month() as u8, z.day() as u8)
}

/// The user of a verified client certificate: (CN, [O...]) of its subject, as
/// Kubernetes' x509 authenticator reads them (Go's `pkix.Name`): the last CN, every O,
/// values of string types only (others are passed over). None, and so no user, for a
/// certificate that does not parse or whose text is not valid in its string type (Go
/// refuses such a certificate outright), or whose subject has no CN.
pub fn cert_user(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let mut cn = None;
    for a in subject.iter_common_name() {
        if let Some(v) = text(a)? {
            cn = Some(v);
        }
    }
    let mut orgs = vec![];
    for a in subject.iter_organization() {
        orgs.extend(text(a)?);
    }
    Some((cn?, orgs))
}

/// An attribute's text: `Some(None)` for a value of no string type, None for text
/// that is not valid in its type (UTF-8 for most, UTF-16 for BMPString).
fn text(a: &x509_parser::x509::AttributeTypeAndValue<'_>) -> Option<Option<String>> {
    use x509_parser::asn1_rs::{BmpString, Tag};
    match a.attr_value().tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String | Tag::NumericString => {
            a.as_str().ok().map(|s| Some(s.to_string()))
        }
        Tag::BmpString => BmpString::try_from(a.attr_value())
            .ok()
            .map(|s| Some(s.string())),
        _ => Some(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use rustls::client::ResolvesClientCert;
    use rustls::sign::CertifiedKey;

    fn params(cn: &str) -> rcgen::CertificateParams {
        let mut p = rcgen::CertificateParams::new(vec![]).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p
    }

    /// A CA for `--client-ca-file`: its certificate, and it as the issuer of others.
    fn ca() -> (rcgen::Certificate, rcgen::Issuer<'static, rcgen::KeyPair>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = params("crust test CA");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let c = p.self_signed(&key).unwrap();
        (c, rcgen::Issuer::new(p, key))
    }

    /// A client certificate of `cn` signed by `issuer` (self-signed without one).
    fn client_cert(
        cn: &str,
        issuer: Option<&rcgen::Issuer<'_, rcgen::KeyPair>>,
    ) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let p = params(cn);
        let c = match issuer {
            Some(i) => p.signed_by(&key, i).unwrap(),
            None => p.self_signed(&key).unwrap(),
        };
        let key = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        (c.der().clone(), key)
    }

    /// A client that presents its key's certificate (or nothing) and writes down the CA subjects the
    /// server named when it asked for a certificate.
    #[derive(Debug)]
    struct Client {
        key: Option<Arc<CertifiedKey>>,
        hints: Mutex<Vec<Vec<u8>>>,
    }

    impl ResolvesClientCert for Client {
        fn resolve(&self, hints: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
            *self.hints.lock() = hints.iter().map(|h| h.to_vec()).collect();
            self.key.clone()
        }
        fn has_certs(&self) -> bool {
            self.key.is_some()
        }
    }

    /// One handshake between the server's config and a client presenting `key`: the
    /// user the server makes of it, and the CA subjects the client was shown.
    async fn handshake(
        server: (rustls::ServerConfig, Option<ClientVerifier>),
        key: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>,
    ) -> (Option<Result<(String, Vec<String>), ()>>, Vec<Vec<u8>>) {
        let p = provider();
        let key = key.map(|(c, k)| Arc::new(CertifiedKey::from_der(vec![c], k, &p).unwrap()));
        let client = Arc::new(Client {
            key,
            hints: Mutex::new(vec![]),
        });
        let cfg = rustls::ClientConfig::builder_with_provider(p.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert::new(p, vec![])))
            .with_client_cert_resolver(client.clone());
        let (a, b) = tokio::io::duplex(1 << 16);
        let (verifier, acceptor) = (
            server.1,
            tokio_rustls::TlsAcceptor::from(Arc::new(server.0)),
        );
        let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        let name = ServerName::try_from("localhost").unwrap();
        let (s, c) = tokio::join!(acceptor.accept(a), connector.connect(name, b));
        let (s, _c) = (s.unwrap(), c.unwrap());
        let user = client_user(verifier.as_ref(), s.get_ref().1.peer_certificates());
        let hints = client.hints.lock().clone();
        (user, hints)
    }

    /// A folder (`crustlet-NAME-PID`) with a client CA (`ca.pem`, returned with its
    /// issuer) and a self-signed serving certificate and key (`c.pem`, `k.pem`).
    fn mtls_dir(
        name: &str,
    ) -> (
        std::path::PathBuf,
        rcgen::Certificate,
        rcgen::Issuer<'static, rcgen::KeyPair>,
    ) {
        let dir = std::env::temp_dir().join(format!("crustlet-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca_cert, issuer) = ca();
        std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
        let (crt, key) = self_signed("localhost", &[]).unwrap();
        std::fs::write(dir.join("c.pem"), crt).unwrap();
        std::fs::write(dir.join("k.pem"), key).unwrap();
        (dir, ca_cert, issuer)
    }

    /// The server config of [`mtls_dir`]'s files.
    fn server_of(dir: &Path) -> (rustls::ServerConfig, Option<ClientVerifier>) {
        server_config(
            &dir.join("c.pem"),
            &dir.join("k.pem"),
            Some(&dir.join("ca.pem")),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn any_client_is_let_in_and_judged_by_the_ca_afterwards() {
        let (dir, ca_cert, issuer) = mtls_dir("mtls");
        let config = || server_of(&dir);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_cert.der().clone()).unwrap();
        let subjects: Vec<Vec<u8>> = roots
            .subjects()
            .iter()
            .map(|d| d.as_ref().to_vec())
            .collect();

        let alice = client_cert("alice", Some(&issuer));
        let (user, hints) = handshake(config(), Some(alice)).await;
        assert_eq!(user, Some(Ok(("alice".to_string(), vec![]))));
        assert_eq!(hints, subjects, "the server names its CA when it asks");

        let mallory = client_cert("mallory", None);
        let (user, _) = handshake(config(), Some(mallory)).await;
        assert_eq!(user, Some(Err(())), "in, but as no one");

        let (user, _) = handshake(config(), None).await;
        assert_eq!(user, None, "no certificate: left to a bearer token");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_client_certificate_names_its_user_and_groups() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec![]).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:masters");
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        let c = p.self_signed(&key).unwrap();
        let (user, groups) = cert_user(c.der()).unwrap();
        assert_eq!(user, "kube-apiserver-kubelet-client");
        assert_eq!(groups, ["system:masters"]);
        assert_eq!(
            cert_user(&c.der()[..40]),
            None,
            "a cut certificate names no one"
        );
    }

    /// A client certificate signed by `issuer` from `p`, with a fresh key.
    fn signed(
        p: rcgen::CertificateParams,
        issuer: &rcgen::Issuer<'_, rcgen::KeyPair>,
    ) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let c = p.signed_by(&key, issuer).unwrap();
        let key = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        (c.der().clone(), key)
    }

    #[tokio::test]
    async fn an_expired_early_or_foreign_certificate_names_no_one() {
        let (dir, _, issuer) = mtls_dir("mtls-odd");
        let config = || server_of(&dir);
        let mut expired = params("alice");
        expired.not_before = rcgen::date_time_ymd(2020, 1, 1);
        expired.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let mut early = params("alice");
        early.not_before = rcgen::date_time_ymd(2200, 1, 1);
        early.not_after = rcgen::date_time_ymd(2201, 1, 1);
        let (_, other_ca) = ca();
        // A subject alternative name of an odd kind, and a valid certificate otherwise:
        // the user is still its subject's.
        let mut odd_san = params("alice");
        odd_san.subject_alt_names = vec![
            rcgen::SanType::URI("spiffe://cluster.local/ns/x/sa/y".try_into().unwrap()),
            rcgen::SanType::IpAddress("10.0.0.1".parse().unwrap()),
        ];
        let cases = [
            ("expired", signed(expired, &issuer), Some(Err(()))),
            ("not yet valid", signed(early, &issuer), Some(Err(()))),
            (
                "another CA's",
                signed(params("alice"), &other_ca),
                Some(Err(())),
            ),
            (
                "an odd SAN",
                signed(odd_san, &issuer),
                Some(Ok(("alice".to_string(), vec![]))),
            ),
        ];
        for (what, cert, want) in cases {
            let (user, _) = handshake(config(), Some(cert)).await;
            assert_eq!(user, want, "{what}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A self-signed certificate whose subject is `dn`.
    fn with_subject(dn: rcgen::DistinguishedName) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec![]).unwrap();
        p.distinguished_name = dn;
        p.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn odd_subjects_name_whom_kubernetes_would() {
        use rcgen::{DnType, DnValue};
        // CN as BMPString (UTF-16), O as PrintableString and as UTF8String.
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            DnValue::BmpString("système:node:n1".try_into().unwrap()),
        );
        dn.push(
            DnType::OrganizationName,
            DnValue::PrintableString("system:nodes".try_into().unwrap()),
        );
        let der = with_subject(dn);
        assert_eq!(
            cert_user(&der),
            Some((
                "système:node:n1".to_string(),
                vec!["system:nodes".to_string()]
            ))
        );

        // A CN whose UTF8String is not UTF-8: no user (Go refuses the certificate). The
        // subject is the name's second place in a self-signed certificate (the issuer's
        // is first).
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(DnType::CommonName, "alice");
        let mut der = with_subject(dn);
        let at = der.windows(5).rposition(|w| w == b"alice").unwrap();
        der[at + 2] = 0xff;
        assert_eq!(cert_user(&der), None);

        // A BMPString that is not UTF-16 (a lone surrogate): no user.
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            DnValue::BmpString("ab".try_into().unwrap()),
        );
        let mut der = with_subject(dn);
        // The BMPString's header (tag 0x1e, length 4), then "a" made a high surrogate.
        let at = der
            .windows(6)
            .rposition(|w| w == [0x1e, 4, 0, b'a', 0, b'b'])
            .unwrap();
        der[at + 2] = 0xd8;
        assert_eq!(cert_user(&der), None);

        // No CN at all: no user; an O alone does not make one.
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(DnType::OrganizationName, "system:masters");
        assert_eq!(cert_user(&with_subject(dn)), None);
    }

    #[test]
    fn the_self_signed_certificate_is_made_once_and_loads() {
        let dir = std::env::temp_dir().join(format!("crustlet-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (c, k) = serving_files(None, None, &dir, "n1", &["10.0.0.5".into()]).unwrap();
        let first = std::fs::read(&c).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&k).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let (c2, _) = serving_files(None, None, &dir, "n1", &[]).unwrap();
        assert_eq!(
            std::fs::read(c2).unwrap(),
            first,
            "reused on the next start"
        );
        server_config(&c, &k, None).unwrap();
        // Its own certificate as a client CA: loads as well.
        server_config(&c, &k, Some(&c)).unwrap();
        assert!(serving_files(Some(&c), None, &dir, "n1", &[]).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
