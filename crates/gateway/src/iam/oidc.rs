//! IAM's verbs on an account's OpenID Connect providers (CreateOpenIDConnectProvider,
//! GetOpenIDConnectProvider, ListOpenIDConnectProviders, DeleteOpenIDConnectProvider,
//! AddClientIDToOpenIDConnectProvider, RemoveClientIDFromOpenIDConnectProvider,
//! UpdateOpenIDConnectProviderThumbprint).
//!
//! An account's root may use them on its account's providers; an account's user when its
//! policies allow `iam:VERB` on the provider's ARN
//! (`arn:aws:iam::ACCOUNT:oidc-provider/HOST/PATH`), judged before the answer says whether
//! the provider exists. An ARN of another account's provider names none here. The
//! operator's users, when their policies allow, keep providers of their own
//! (`arn:aws:iam:::oidc-provider/HOST/PATH`), which the operator's roles trust.

use client::Pool;

use super::{escape, iso_time, may, param, Answered, Caller, IamRefusal, Origin, Params};
use crate::layout::OidcProvider;
use crate::oidc;
use crate::policy::Action;

/// The IAM verbs served here.
pub(super) const VERBS: &[&str] = &[
    "CreateOpenIDConnectProvider",
    "GetOpenIDConnectProvider",
    "ListOpenIDConnectProviders",
    "DeleteOpenIDConnectProvider",
    "AddClientIDToOpenIDConnectProvider",
    "RemoveClientIDFromOpenIDConnectProvider",
    "UpdateOpenIDConnectProviderThumbprint",
];

/// Does IAM's verb `verb` on OpenID Connect providers for `signer`.
pub(super) async fn act(
    pool: &Pool,
    signer: &Caller,
    verb: &str,
    params: &Params,
    from: Origin,
) -> Result<Answered, IamRefusal> {
    // The operator's users' providers are kept under no account, for their roles.
    let account = signer.account().unwrap_or_default();
    match verb {
        "ListOpenIDConnectProviders" => {
            may(
                signer,
                Action::ListOpenIDConnectProviders,
                &oidc::arn_in(account, "*"),
                from,
            )?;
            let members: String = oidc::list(pool, account)
                .await?
                .iter()
                .map(|p| format!("<member><Arn>{}</Arn></member>", escape(&oidc::arn(p))))
                .collect();
            return Ok(Answered::Result(
                "ListOpenIDConnectProviders",
                format!("<OpenIDConnectProviderList>{members}</OpenIDConnectProviderList>"),
            ));
        }
        "CreateOpenIDConnectProvider" => {
            let url = param(params, "Url")?;
            let arn = oidc::arn_in(account, oidc::name(url));
            may(signer, Action::CreateOpenIDConnectProvider, &arn, from)?;
            let client_ids = listed(params, "ClientIDList");
            let thumbprints = listed(params, "ThumbprintList");
            let made = oidc::create(pool, account, url, client_ids, thumbprints).await?;
            return Ok(Answered::Result(
                "CreateOpenIDConnectProvider",
                format!(
                    "<OpenIDConnectProviderArn>{}</OpenIDConnectProviderArn>",
                    escape(&oidc::arn(&made))
                ),
            ));
        }
        _ => {}
    }
    let action = match verb {
        "GetOpenIDConnectProvider" => Action::GetOpenIDConnectProvider,
        "DeleteOpenIDConnectProvider" => Action::DeleteOpenIDConnectProvider,
        "AddClientIDToOpenIDConnectProvider" => Action::AddClientIDToOpenIDConnectProvider,
        "RemoveClientIDFromOpenIDConnectProvider" => {
            Action::RemoveClientIDFromOpenIDConnectProvider
        }
        "UpdateOpenIDConnectProviderThumbprint" => Action::UpdateOpenIDConnectProviderThumbprint,
        other => return Err(IamRefusal::UnknownAction(other.into())),
    };
    let arn = param(params, "OpenIDConnectProviderArn")?;
    may(signer, action, arn, from)?;
    let missing = || IamRefusal::NoSuchEntity(format!("OpenID Connect provider {arn}"));
    let name = oidc::named_by(account, arn).ok_or_else(missing)?;
    let provider = oidc::get(pool, account, name).await?.ok_or_else(missing)?;
    Ok(match action {
        Action::GetOpenIDConnectProvider => {
            Answered::Result("GetOpenIDConnectProvider", provider_xml(&provider))
        }
        Action::DeleteOpenIDConnectProvider => {
            oidc::remove(pool, &provider).await?;
            Answered::Done("DeleteOpenIDConnectProvider")
        }
        Action::AddClientIDToOpenIDConnectProvider => {
            oidc::set_client_id(pool, &provider, param(params, "ClientID")?, true).await?;
            Answered::Done("AddClientIDToOpenIDConnectProvider")
        }
        Action::RemoveClientIDFromOpenIDConnectProvider => {
            oidc::set_client_id(pool, &provider, param(params, "ClientID")?, false).await?;
            Answered::Done("RemoveClientIDFromOpenIDConnectProvider")
        }
        _ => {
            let thumbprints = listed(params, "ThumbprintList");
            if thumbprints.is_empty() {
                return Err(IamRefusal::Missing("ThumbprintList"));
            }
            oidc::set_thumbprints(pool, &provider, thumbprints).await?;
            Answered::Done("UpdateOpenIDConnectProviderThumbprint")
        }
    })
}

/// The members of list parameter `name` (`NAME.member.N`, from 1 on), in order.
fn listed(params: &Params, name: &str) -> Vec<String> {
    (1..)
        .map_while(|n| params.get(&format!("{name}.member.{n}")).cloned())
        .collect()
}

/// A provider as GetOpenIDConnectProvider describes it: its URL as given.
fn provider_xml(provider: &OidcProvider) -> String {
    let members = |list: &[String]| -> String {
        list.iter()
            .map(|item| format!("<member>{}</member>", escape(item)))
            .collect()
    };
    format!(
        "<Url>{}</Url><ClientIDList>{}</ClientIDList><ThumbprintList>{}</ThumbprintList>\
         <CreateDate>{}</CreateDate><Tags></Tags>",
        escape(&provider.url),
        members(&provider.client_ids),
        members(&provider.thumbprints),
        iso_time(provider.created_ns)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_parameters_are_read_in_order_up_to_the_first_gap() {
        let mut params = Params::new();
        params.insert("ClientIDList.member.1".into(), "a".into());
        params.insert("ClientIDList.member.2".into(), "b".into());
        params.insert("ClientIDList.member.4".into(), "lost".into());
        assert_eq!(listed(&params, "ClientIDList"), ["a", "b"]);
        assert!(listed(&params, "ThumbprintList").is_empty());
    }
}
