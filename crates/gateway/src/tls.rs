//! The gateway's own certificate when the operator brings none: a local authority
//! (`ca.pem`, the file clients trust) and a server certificate it signs (`cert.pem`,
//! `key.pem`) for the gateway's address and `localhost`.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

pub const CA_FILE: &str = "ca.pem";
pub const CERT_FILE: &str = "cert.pem";
pub const KEY_FILE: &str = "key.pem";

/// The PEM files of a gateway certificate.
pub struct Generated {
    /// The authority clients trust (`ca.pem`).
    pub ca: String,
    /// The server certificate followed by the authority's (`cert.pem`).
    pub chain: String,
    /// The server's private key (`key.pem`).
    pub key: String,
}

/// A new authority, and a certificate it signs for `names` (DNS names or IP addresses).
/// The authority's key is not kept: it signs this one certificate.
pub fn generate(names: &[String]) -> Result<Generated, String> {
    let fail = |e: rcgen::Error| format!("making the gateway's certificate: {e}");
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
    ca.distinguished_name
        .push(DnType::CommonName, "coffer gateway authority");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().map_err(fail)?;
    let ca_cert = ca.self_signed(&ca_key).map_err(fail)?;

    let mut leaf = CertificateParams::new(names.to_vec()).map_err(fail)?;
    leaf.distinguished_name
        .push(DnType::CommonName, "coffer gateway");
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().map_err(fail)?;
    let issuer = Issuer::new(ca, &ca_key);
    let cert = leaf.signed_by(&key, &issuer).map_err(fail)?;
    Ok(Generated {
        ca: ca_cert.pem(),
        chain: format!("{}{}", cert.pem(), ca_cert.pem()),
        key: key.serialize_pem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_loads_into_a_server_configuration() {
        let dir = tempfile::tempdir().expect("tempdir");
        let made = generate(&["127.0.0.1".into(), "localhost".into()]).expect("generate");
        let (cert, key) = (dir.path().join(CERT_FILE), dir.path().join(KEY_FILE));
        std::fs::write(&cert, &made.chain).expect("write");
        std::fs::write(&key, &made.key).expect("write");
        crate::serve::tls_config(&cert, &key).expect("a server configuration");
        assert!(made.ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(made.chain.ends_with(&made.ca));
    }
}
