//! `stagger http`'s TLS trust: `--cacert` as curl has it, and TLS errors
//! said for a person.
//!
//! A `--cacert` file may hold the CAs that sign the server's certificate,
//! or the server's certificate itself (a self-signed one, as
//! `openssl req -x509` makes it). rustls' WebPKI verifier refuses the
//! latter when the certificate says it is a CA (`CA:TRUE`, openssl's
//! default): a CA may not be used as a server's own certificate. curl
//! accepts it, because the file names that very certificate. So does
//! [`PinnedOrWebPki`]: a server whose certificate is, byte for byte, one
//! of the file's is trusted, its name and dates still checked; every other
//! server is checked by the WebPKI verifier against the file's
//! certificates.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Trusts the server's certificate when it is one of `pinned`; otherwise
/// asks the WebPKI verifier (whose roots are the same certificates).
#[derive(Debug)]
pub struct PinnedOrWebPki {
    pinned: Vec<CertificateDer<'static>>,
    webpki: Arc<WebPkiServerVerifier>,
    provider: Arc<CryptoProvider>,
}

impl PinnedOrWebPki {
    /// A verifier trusting `certs` (at least one), as CAs or as the
    /// server's own certificate.
    pub fn new(certs: Vec<CertificateDer<'static>>) -> Result<Self, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(certs.iter().cloned());
        if added == 0 {
            return Err("none of its certificates can be read".into());
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| e.to_string())?;
        Ok(PinnedOrWebPki {
            pinned: certs,
            webpki,
            provider,
        })
    }

    fn is_pinned(&self, cert: &CertificateDer<'_>) -> bool {
        self.pinned.iter().any(|p| p.as_ref() == cert.as_ref())
    }
}

/// Whether WebPKI refused a certificate only for what pinning it settles:
/// it is a CA certificate used as the server's own, or nothing signed it.
fn settled_by_pinning(e: &rustls::Error) -> bool {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => true,
        rustls::Error::InvalidCertificate(CertificateError::Other(o)) => {
            matches!(
                o.0.downcast_ref::<webpki::Error>(),
                Some(webpki::Error::CaUsedAsEndEntity)
            )
        }
        _ => false,
    }
}

impl ServerCertVerifier for PinnedOrWebPki {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(v) => Ok(v),
            // WebPKI checks the dates before CA-ness, so a pinned
            // certificate that gets this far is within its dates; its
            // name is still checked.
            Err(e) if self.is_pinned(end_entity) && settled_by_pinning(&e) => {
                let parsed = ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&parsed, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The TLS settings `--cacert` makes: these certificates (PEM) instead of
/// the system's, as CAs or as the server's own certificate.
pub fn cacert_config(certs: Vec<CertificateDer<'static>>) -> Result<rustls::ClientConfig, String> {
    let verifier = PinnedOrWebPki::new(certs)?;
    let provider = verifier.provider.clone();
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    // reqwest is built for HTTP/1.1 here; say so in the handshake as it would.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The rustls error somewhere in a transport error's chain (an I/O error
/// carries it, or another I/O error carrying it, without naming either as
/// its source).
fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur = Some(e);
    for _ in 0..32 {
        let e = cur?;
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        cur = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// A certificate error said for a person: what was wrong and which flag
/// changes it. `cacert` is the `--cacert` file, if one was given. `None`
/// when the error is not about the server's certificate.
pub fn explain(e: &(dyn std::error::Error + 'static), cacert: Option<&str>) -> Option<String> {
    let rustls::Error::InvalidCertificate(c) = rustls_error(e)? else {
        return None;
    };
    let trusted = match cacert {
        Some(f) => format!("the certificates in {f} (--cacert)"),
        None => "the CAs this system trusts".to_string(),
    };
    let skip = "-k skips the check (testing only)";
    let what = match c {
        // BadSignature: the certificate names a trusted issuer that did not
        // sign it.
        CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
            "the server's certificate is signed by none of {trusted}; give the CA that signed \
             it, or the server's own certificate, with --cacert FILE; {skip}"
        ),
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            format!(
                "the server's certificate is not for the host in the URL ({c}); use a name \
                 the certificate lists; {skip}"
            )
        }
        CertificateError::Expired
        | CertificateError::ExpiredContext { .. }
        | CertificateError::NotValidYet
        | CertificateError::NotValidYetContext { .. } => format!(
            "the server's certificate is outside its dates ({c}); check the server's \
             certificate and this machine's clock; {skip}"
        ),
        CertificateError::Other(o)
            if matches!(
                o.0.downcast_ref::<webpki::Error>(),
                Some(webpki::Error::CaUsedAsEndEntity)
            ) =>
        {
            format!(
                "the server's certificate is a CA certificate used as the server's own, and \
                 it is not one of {trusted}; to trust it, give that certificate with \
                 --cacert FILE; {skip}"
            )
        }
        other => format!(
            "the server's certificate was refused ({other}); --cacert FILE trusts other \
             certificates; {skip}"
        ),
    };
    Some(what)
}
