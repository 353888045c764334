//! Keys and certificates: the cluster's certificate authority, held by the monitors, and each
//! entity's identity (its private key, its certificate, and the authority to check peers by).
//!
//! An entity's certificate names it (`osd.3` as the DNS name `osd.3.coffer`). TLS 1.3 checks
//! both ends' chains against the cluster authority; the server then checks the client's
//! certificate against the name the client claims and asks the application whether that entity
//! (with that certificate) is still allowed, so removing or replacing an entity's key revokes
//! it without revocation lists.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::entity::EntityName;

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating a key or certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("keyring: {0}")]
    Keyring(String),
    #[error("setting up TLS: {0}")]
    Tls(#[from] rustls::Error),
}

/// The cluster's certificate authority. Its key never leaves the monitors.
pub struct ClusterCa {
    cluster: String,
    key: KeyPair,
    cert: CertificateDer<'static>,
}

/// The authority's distinguished name and usages; identical every time, so the authority can
/// be rebuilt from its key alone.
fn ca_params(cluster: &str) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, format!("coffer cluster {cluster}"));
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

impl ClusterCa {
    /// A new authority for the cluster named `cluster` (its id).
    pub fn generate(cluster: &str) -> Result<Self, CertError> {
        let key = KeyPair::generate()?;
        let cert = ca_params(cluster)?.self_signed(&key)?.der().clone();
        Ok(ClusterCa {
            cluster: cluster.to_owned(),
            key,
            cert,
        })
    }

    /// The authority as saved by [`ClusterCa::key_pem`] and [`ClusterCa::cert_pem`].
    pub fn from_pem(cluster: &str, key_pem: &str, cert_pem: &str) -> Result<Self, CertError> {
        let key = KeyPair::from_pem(key_pem)?;
        let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| CertError::Keyring(format!("authority certificate: {e}")))?;
        Ok(ClusterCa {
            cluster: cluster.to_owned(),
            key,
            cert,
        })
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    pub fn cert_pem(&self) -> String {
        pem_of("CERTIFICATE", &self.cert)
    }

    /// A fresh key and certificate for `entity`.
    pub fn issue(&self, entity: &EntityName) -> Result<Identity, CertError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![entity.dns_name()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, entity.as_str());
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let issuer = Issuer::new(ca_params(&self.cluster)?, &self.key);
        let cert = params.signed_by(&key, &issuer)?.der().clone();
        Ok(Identity {
            entity: entity.clone(),
            cert,
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
            ca: self.cert.clone(),
        })
    }
}

/// One entity's credentials: enough to authenticate to any peer of the cluster and to check
/// that peer in turn.
pub struct Identity {
    entity: EntityName,
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
    ca: CertificateDer<'static>,
}

impl Identity {
    pub fn entity(&self) -> &EntityName {
        &self.entity
    }

    pub fn cert(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// The keyring form: the private key, the entity's certificate, then the authority's.
    pub fn to_pem(&self) -> String {
        let mut text = pem_of("PRIVATE KEY", self.key.secret_pkcs8_der());
        text.push_str(&pem_of("CERTIFICATE", &self.cert));
        text.push_str(&pem_of("CERTIFICATE", &self.ca));
        text
    }

    pub fn from_pem(entity: EntityName, text: &str) -> Result<Self, CertError> {
        let key = match PrivateKeyDer::from_pem_slice(text.as_bytes()) {
            Ok(PrivateKeyDer::Pkcs8(key)) => key,
            Ok(_) => return Err(CertError::Keyring("the private key is not PKCS#8".into())),
            Err(e) => return Err(CertError::Keyring(format!("private key: {e}"))),
        };
        let certs = CertificateDer::pem_slice_iter(text.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CertError::Keyring(format!("certificates: {e}")))?;
        let [cert, ca] = <[CertificateDer<'static>; 2]>::try_from(certs).map_err(|certs| {
            CertError::Keyring(format!(
                "expected the entity's certificate and the authority's, found {} certificates",
                certs.len()
            ))
        })?;
        let identity = Identity {
            entity,
            cert,
            key,
            ca,
        };
        identity.check_names_self()?;
        Ok(identity)
    }

    fn check_names_self(&self) -> Result<(), CertError> {
        cert_names(&self.cert, &self.entity).map_err(|e| {
            CertError::Keyring(format!("the certificate is not for {}: {e}", self.entity))
        })
    }

    fn roots(&self) -> Result<Arc<RootCertStore>, CertError> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.clone())?;
        Ok(Arc::new(roots))
    }

    pub(crate) fn client_config(&self) -> Result<Arc<ClientConfig>, CertError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(vec![self.cert.clone()], self.key.clone_key().into())?;
        config.resumption = rustls::client::Resumption::disabled();
        Ok(Arc::new(config))
    }

    pub(crate) fn server_config(&self) -> Result<Arc<ServerConfig>, CertError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            self.roots()?,
            provider.clone(),
        )
        .build()
        .map_err(|e| CertError::Keyring(format!("client verifier: {e}")))?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.cert.clone()], self.key.clone_key().into())?;
        // No session tickets: nothing may follow the handshake that the crc switch would
        // have to skip (docs/design/messenger.md).
        config.send_tls13_tickets = 0;
        Ok(Arc::new(config))
    }
}

/// Whether `cert` names `entity`. The chain itself was checked by TLS.
pub(crate) fn cert_names(cert: &CertificateDer<'_>, entity: &EntityName) -> Result<(), String> {
    let server_name = server_name(entity)?;
    let end_entity = webpki::EndEntityCert::try_from(cert).map_err(|e| e.to_string())?;
    end_entity
        .verify_is_valid_for_subject_name(&server_name)
        .map_err(|e| e.to_string())
}

pub(crate) fn server_name(entity: &EntityName) -> Result<ServerName<'static>, String> {
    ServerName::try_from(entity.dns_name()).map_err(|e| e.to_string())
}

fn pem_of(label: &str, der: &[u8]) -> String {
    pem::encode(&pem::Pem::new(label, der.to_vec()))
}
