//! Managed policies: the policies of AWS's that clients attach by ARN to users, groups and
//! roles (IAM's AttachUserPolicy, AttachGroupPolicy, AttachRolePolicy) rather than write
//! out. The gateway serves AWS's managed policies for the services it answers (S3, IAM),
//! with the statements AWS publishes for them, less the actions of services it does not
//! serve; an account's own managed policies (IAM's CreatePolicy) are not served.

use crate::users::{Document, PolicyRefusal};
use crate::Error;

/// AWS's prefix of its own managed policies' ARNs.
const AWS_PREFIX: &str = "arn:aws:iam::aws:policy/";

/// The most managed policies attached to one user, group or role (IAM's default quota).
pub const ATTACHED_MAX: usize = 10;

/// The managed policies served, by name, with their documents.
const SERVED: &[(&str, &str)] = &[
    (
        "AdministratorAccess",
        r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*",
            "Resource": "*"}]}"#,
    ),
    (
        "AmazonS3FullAccess",
        r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:*"],
            "Resource": "*"}]}"#,
    ),
    (
        "AmazonS3ReadOnlyAccess",
        r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
            "Action": ["s3:Get*", "s3:List*", "s3:Describe*"], "Resource": "*"}]}"#,
    ),
    (
        "IAMFullAccess",
        r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "iam:*",
            "Resource": "*"}]}"#,
    ),
    (
        "IAMReadOnlyAccess",
        r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
            "Action": ["iam:GenerateCredentialReport", "iam:GenerateServiceLastAccessedDetails",
            "iam:Get*", "iam:List*", "iam:SimulateCustomPolicy", "iam:SimulatePrincipalPolicy"],
            "Resource": "*"}]}"#,
    ),
];

/// The name of managed policy `arn` (IAM's PolicyName) and its document, if it is served.
pub fn find(arn: &str) -> Option<(&'static str, &'static str)> {
    let name = arn.strip_prefix(AWS_PREFIX)?;
    SERVED.iter().find(|(served, _)| *served == name).copied()
}

/// `attached` (of `holder`: "user NAME", "group NAME", "role NAME") with `arn` attached
/// (`attach`) or detached. Attaching what is attached changes nothing, as in IAM; detaching
/// what is not, or attaching what is not served, is NotFound; more than [`ATTACHED_MAX`],
/// a Limit.
pub fn change(
    attached: &mut Vec<String>,
    holder: &str,
    arn: &str,
    attach: bool,
) -> Result<(), Error> {
    let at = attached.iter().position(|given| given == arn);
    match (attach, at) {
        (true, Some(_)) => Ok(()),
        (true, None) => {
            if find(arn).is_none() {
                return Err(Error::NotFound(format!(
                    "policy {arn} (the managed policies served are AWS's {})",
                    SERVED
                        .iter()
                        .map(|(name, _)| *name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            if attached.len() >= ATTACHED_MAX {
                return Err(Error::Limit(format!(
                    "{holder} has {ATTACHED_MAX} managed policies attached already"
                )));
            }
            attached.push(arn.into());
            Ok(())
        }
        (false, Some(at)) => {
            attached.remove(at);
            Ok(())
        }
        (false, None) => Err(Error::NotFound(format!(
            "policy {arn} attached to {holder}"
        ))),
    }
}

/// The documents of the managed policies `attached` to `holder` (its kind and name): a
/// policy no longer served is an error, not a silent loss of what it allowed or denied.
pub fn documents<'a>(
    attached: &'a [String],
    holder: (&'static str, &'a str),
) -> Result<Vec<Document<'a>>, Error> {
    attached
        .iter()
        .map(|arn| match find(arn) {
            Some((_, text)) => Ok(Document {
                holder,
                name: arn,
                text,
            }),
            None => Err(Error::IamPolicy(PolicyRefusal::Document(format!(
                "{} {} has managed policy {arn} attached, which is not served",
                holder.0, holder.1
            )))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    #[test]
    fn every_served_policy_reads_as_a_user_s_and_a_role_s() {
        for (name, document) in SERVED {
            Policy::parse_identity(document).unwrap_or_else(|e| panic!("{name}: {e}"));
            Policy::parse_role(document).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let arn = "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess";
        assert_eq!(
            find(arn).map(|(name, _)| name),
            Some("AmazonS3ReadOnlyAccess")
        );
        assert_eq!(find("arn:aws:iam::RGW00000000000000001:policy/Mine"), None);
        assert_eq!(find("arn:aws:iam::aws:policy/AmazonS3FullAccessX"), None);
    }

    #[test]
    fn attaching_twice_keeps_one_and_detaching_what_is_not_attached_is_refused() {
        let full = "arn:aws:iam::aws:policy/AmazonS3FullAccess";
        let mut attached = Vec::new();
        change(&mut attached, "user u", full, true).expect("attached");
        change(&mut attached, "user u", full, true).expect("attached again");
        assert_eq!(attached, vec![full.to_owned()]);
        let unknown = change(
            &mut attached,
            "user u",
            "arn:aws:iam::aws:policy/Nope",
            true,
        );
        assert!(matches!(unknown, Err(Error::NotFound(_))), "{unknown:?}");
        change(&mut attached, "user u", full, false).expect("detached");
        let again = change(&mut attached, "user u", full, false);
        assert!(matches!(again, Err(Error::NotFound(_))), "{again:?}");
        assert!(attached.is_empty());
        let mut full_up: Vec<String> = (0..ATTACHED_MAX).map(|n| format!("{n}")).collect();
        let over = change(&mut full_up, "user u", full, true);
        assert!(matches!(over, Err(Error::Limit(_))), "{over:?}");
        let unserved = ["arn:aws:iam::aws:policy/Nope".to_owned()];
        let gone = documents(&unserved, ("user", "u"));
        assert!(gone.is_err());
    }
}
