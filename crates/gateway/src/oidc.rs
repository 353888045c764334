//! An account's OpenID Connect identity providers (IAM's CreateOpenIDConnectProvider and
//! its kin): whom the account trusts to vouch for web identities, by URL, with the
//! audiences (OAuth client ids) it accepts and the thumbprints of the certificates the
//! provider serves its keys under.
//!
//! One record per provider in the users' object, under `oidc/ACCOUNT$NAME`
//! ([`layout::oidc_key`]), where the name is the URL without its scheme, as in the
//! provider's ARN (`arn:aws:iam::ACCOUNT:oidc-provider/NAME`): an account has one provider
//! per URL. The operator's users' providers are kept under the empty account
//! (`oidc/$NAME`, `arn:aws:iam:::oidc-provider/NAME`).

use client::Pool;

use crate::layout::{self, OidcProvider};
use crate::omap::Pages;
use crate::users;
use crate::Error;

/// IAM's quotas: providers per account, audiences and thumbprints per provider.
pub const PROVIDERS_MAX: usize = 100;
pub const CLIENT_IDS_MAX: usize = 100;
pub const THUMBPRINTS_MAX: usize = 5;
/// IAM's limits on a URL and a client id.
const URL_BYTES_MAX: usize = 255;
const CLIENT_ID_BYTES_MAX: usize = 255;
/// A SHA-1 thumbprint in hex.
const THUMBPRINT_CHARS: usize = 40;

/// The provider's name in its ARN: its URL without the scheme.
pub fn name(url: &str) -> &str {
    url.strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .unwrap_or(url)
}

/// The ARN of provider `name` of `account`.
pub fn arn_in(account: &str, name: &str) -> String {
    format!("arn:aws:iam::{account}:oidc-provider/{name}")
}

pub fn arn(provider: &OidcProvider) -> String {
    arn_in(&provider.account, name(&provider.url))
}

/// The provider name `arn` gives, if it is the ARN of a provider of `account`.
pub fn named_by<'a>(account: &str, arn: &'a str) -> Option<&'a str> {
    arn.strip_prefix("arn:aws:iam::")?
        .strip_prefix(account)?
        .strip_prefix(":oidc-provider/")
        .filter(|name| !name.is_empty())
}

/// A provider's URL: `https://` (or `http://`, which Ceph's gateway takes too) and a host,
/// with no query or fragment, as IAM asks.
fn check_url(url: &str) -> Result<(), Error> {
    let rest = name(url);
    let host = rest.split('/').next().unwrap_or_default();
    let fine = rest.len() < url.len()
        && !host.is_empty()
        && url.len() <= URL_BYTES_MAX
        && !url.contains(['?', '#'])
        && url.bytes().all(|b| b.is_ascii_graphic());
    match fine {
        true => Ok(()),
        false => Err(Error::Invalid(format!(
            "an OpenID Connect provider's URL is https:// and a host, with no query or \
             fragment, at most {URL_BYTES_MAX} bytes, not {url:?}"
        ))),
    }
}

pub fn check_client_id(id: &str) -> Result<(), Error> {
    match !id.is_empty() && id.len() <= CLIENT_ID_BYTES_MAX {
        true => Ok(()),
        false => Err(Error::Invalid(format!(
            "a client id is 1 to {CLIENT_ID_BYTES_MAX} bytes"
        ))),
    }
}

/// Thumbprints: at most [`THUMBPRINTS_MAX`], each 40 letters and digits (a SHA-1 in hex,
/// as IAM checks it).
pub fn check_thumbprints(thumbprints: &[String]) -> Result<(), Error> {
    if thumbprints.len() > THUMBPRINTS_MAX {
        return Err(Error::Limit(format!(
            "a provider has at most {THUMBPRINTS_MAX} thumbprints"
        )));
    }
    for thumbprint in thumbprints {
        let fine = thumbprint.len() == THUMBPRINT_CHARS
            && thumbprint.bytes().all(|b| b.is_ascii_alphanumeric());
        if !fine {
            return Err(Error::Invalid(format!(
                "a thumbprint is {THUMBPRINT_CHARS} hex digits, not {thumbprint:?}"
            )));
        }
    }
    Ok(())
}

/// The list without repeats, first kept.
fn once_each(list: Vec<String>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::with_capacity(list.len());
    for item in list {
        if !kept.contains(&item) {
            kept.push(item);
        }
    }
    kept
}

/// Makes `account` trust the provider at `url`, for tokens naming one of `client_ids`,
/// served under a certificate of one of `thumbprints`; refused if it trusts one at that
/// URL already.
pub async fn create(
    pool: &Pool,
    account: &str,
    url: &str,
    client_ids: Vec<String>,
    thumbprints: Vec<String>,
) -> Result<OidcProvider, Error> {
    check_url(url)?;
    let client_ids = once_each(client_ids);
    if client_ids.len() > CLIENT_IDS_MAX {
        return Err(Error::Limit(format!(
            "a provider has at most {CLIENT_IDS_MAX} client ids"
        )));
    }
    client_ids.iter().try_for_each(|id| check_client_id(id))?;
    let thumbprints = once_each(thumbprints);
    check_thumbprints(&thumbprints)?;
    if list(pool, account).await?.len() >= PROVIDERS_MAX {
        return Err(Error::Limit(format!(
            "an account trusts at most {PROVIDERS_MAX} OpenID Connect providers"
        )));
    }
    let provider = OidcProvider {
        account: account.into(),
        url: url.into(),
        client_ids,
        thumbprints,
        created_ns: layout::now_ns(),
    };
    let key = layout::oidc_key(account, name(url));
    match users::create_record(pool, key, layout::encode(&provider)).await? {
        true => Ok(provider),
        false => Err(Error::Exists(format!(
            "OpenID Connect provider {}",
            arn(&provider)
        ))),
    }
}

/// Provider `name` of `account`, if it trusts one by that name.
pub async fn get(pool: &Pool, account: &str, name: &str) -> Result<Option<OidcProvider>, Error> {
    let found = users::read_record(pool, layout::oidc_key(account, name)).await?;
    Ok(found.map(|(_, provider)| provider))
}

/// `account`'s providers, by name.
pub async fn list(pool: &Pool, account: &str) -> Result<Vec<OidcProvider>, Error> {
    let start = layout::oidc_key(account, "");
    let mut found = Vec::new();
    let mut pages = Pages::new(pool, layout::USERS, layout::before(&start));
    'pages: while let Some(page) = pages.next().await? {
        for (key, value) in page {
            if !key.starts_with(&start) {
                break 'pages;
            }
            found.push(layout::decode(&value).map_err(Error::Corrupt)?);
        }
    }
    Ok(found)
}

/// Changes provider `judged` as `change` makes it, unless it was removed since it was read.
async fn update(
    pool: &Pool,
    judged: &OidcProvider,
    change: impl Fn(OidcProvider) -> Result<OidcProvider, Error>,
) -> Result<(), Error> {
    let key = layout::oidc_key(&judged.account, name(&judged.url));
    let what = format!("OpenID Connect provider {}", arn(judged));
    users::update_record(pool, key, &what, change, |_| Vec::new()).await
}

/// Adds client id `id` to provider `judged` (nothing if it has it), or takes it away.
pub async fn set_client_id(
    pool: &Pool,
    judged: &OidcProvider,
    id: &str,
    add: bool,
) -> Result<(), Error> {
    check_client_id(id)?;
    update(pool, judged, |mut provider| {
        let has = provider.client_ids.iter().any(|c| c == id);
        if add && !has {
            if provider.client_ids.len() >= CLIENT_IDS_MAX {
                return Err(Error::Limit(format!(
                    "a provider has at most {CLIENT_IDS_MAX} client ids"
                )));
            }
            provider.client_ids.push(id.into());
        }
        if !add {
            provider.client_ids.retain(|c| c != id);
        }
        Ok(provider)
    })
    .await
}

/// Replaces provider `judged`'s thumbprints.
pub async fn set_thumbprints(
    pool: &Pool,
    judged: &OidcProvider,
    thumbprints: Vec<String>,
) -> Result<(), Error> {
    let thumbprints = once_each(thumbprints);
    check_thumbprints(&thumbprints)?;
    update(pool, judged, |mut provider| {
        provider.thumbprints = thumbprints.clone();
        Ok(provider)
    })
    .await
}

/// Makes `judged`'s account stop trusting it, unless it changed since it was read.
pub async fn remove(pool: &Pool, judged: &OidcProvider) -> Result<(), Error> {
    let key = layout::oidc_key(&judged.account, name(&judged.url));
    let what = format!("OpenID Connect provider {}", arn(judged));
    let Some((bytes, _)) = users::read_record::<OidcProvider>(pool, key.clone()).await? else {
        return Err(Error::NotFound(what));
    };
    users::remove_as_read(pool, key.clone(), bytes, vec![key], &what).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_providers_and_arns_name_them_back() {
        assert_eq!(
            name("https://id.example.com/realms/a"),
            "id.example.com/realms/a"
        );
        assert_eq!(name("http://id.example.com"), "id.example.com");
        let arn = arn_in("RGW1", "id.example.com/realms/a");
        assert_eq!(
            arn,
            "arn:aws:iam::RGW1:oidc-provider/id.example.com/realms/a"
        );
        assert_eq!(named_by("RGW1", &arn), Some("id.example.com/realms/a"));
        assert_eq!(named_by("RGW2", &arn), None);
        assert_eq!(named_by("RGW1", "arn:aws:iam::RGW1:oidc-provider/"), None);
        assert_eq!(named_by("RGW1", "arn:aws:iam::RGW1:role/x"), None);
    }

    #[test]
    fn what_iam_refuses_is_refused() {
        assert!(check_url("https://id.example.com").is_ok());
        assert!(check_url("http://id.example.com/realm").is_ok());
        for bad in [
            "id.example.com",
            "https://",
            "https:///path",
            "https://id.example.com/?q=1",
            "https://id example.com",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
        assert!(check_url(&format!("https://{}", "a".repeat(URL_BYTES_MAX))).is_err());
        let print = "3768084dfb3d2b68b7897bf5f565da8efEXAMPLE".to_owned();
        assert!(check_thumbprints(std::slice::from_ref(&print)).is_ok());
        assert!(check_thumbprints(&["abc".to_owned()]).is_err());
        assert!(check_thumbprints(&vec![print; THUMBPRINTS_MAX + 1]).is_err());
        assert!(check_client_id("").is_err());
        assert_eq!(
            once_each(vec!["a".into(), "b".into(), "a".into()]),
            ["a", "b"]
        );
    }
}
