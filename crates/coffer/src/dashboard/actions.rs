//! What an admin may do from the dashboard, each the same as a CLI command (named in its
//! confirmation): create a pool, mark an OSD out or in, create an S3 user, create a file
//! system and authorise a client to it, rotate a KMS key. A form is read into an
//! [`Action`] and described for confirmation in pure code; [`run`] carries it out through
//! the functions the CLI uses.

use client::{Cluster, Conf};
use map::cluster::Change;
use map::placement::OsdId;
use messenger::message::Command as MonCommand;

/// One operator action, read from a form.
#[derive(Debug, PartialEq)]
pub enum Action {
    PoolCreate {
        name: String,
        pg_num: u32,
        edge: bool,
    },
    OsdOut {
        id: u32,
    },
    OsdIn {
        id: u32,
    },
    UserCreate {
        name: String,
    },
    FsCreate {
        name: String,
    },
    FsAuthorize {
        fs: String,
        entity: String,
        path: String,
        access: String,
    },
    KmsRotate {
        name: String,
    },
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Result<&'a str, String> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.trim())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("the form has no {name}"))
}

impl Action {
    /// The action a form asks for.
    pub fn from_form(fields: &[(String, String)]) -> Result<Action, String> {
        let text = |name: &str| field(fields, name).map(str::to_string);
        let osd = || -> Result<u32, String> {
            let id = field(fields, "osd")?;
            id.trim_start_matches("osd.")
                .parse()
                .map_err(|_| format!("{id:?} is not an OSD number"))
        };
        Ok(match field(fields, "action")? {
            "pool-create" => {
                let pg_num = field(fields, "pg_num")?;
                Action::PoolCreate {
                    name: text("name")?,
                    pg_num: pg_num
                        .parse()
                        .ok()
                        .filter(|n| (1..=4096).contains(n))
                        .ok_or_else(|| format!("{pg_num:?} PGs: give 1 to 4096"))?,
                    edge: match field(fields, "seal")? {
                        "edge" => true,
                        "osd" => false,
                        other => return Err(format!("seal {other:?}: edge or osd")),
                    },
                }
            }
            "osd-out" => Action::OsdOut { id: osd()? },
            "osd-in" => Action::OsdIn { id: osd()? },
            "user-create" => Action::UserCreate {
                name: text("name")?,
            },
            "fs-create" => Action::FsCreate {
                name: text("name")?,
            },
            "fs-authorize" => {
                let entity = text("entity")?;
                let entity = if entity.contains('.') {
                    entity
                } else {
                    format!("client.{entity}")
                };
                Action::FsAuthorize {
                    fs: text("fs")?,
                    entity,
                    path: field(fields, "path").unwrap_or("/").to_string(),
                    access: text("access")?,
                }
            }
            "kms-rotate" => Action::KmsRotate {
                name: text("name")?,
            },
            other => return Err(format!("there is no action {other:?}")),
        })
    }

    /// What the action will do, and the command that does the same, for its confirmation.
    pub fn describe(&self) -> String {
        match self {
            Action::PoolCreate { name, pg_num, edge } => {
                let seal = if *edge { "edge" } else { "osd" };
                format!(
                    "Create pool {name} with {pg_num} placement groups, sealed at the {} \
                     (coffer pool create {name} --pg-num {pg_num} --seal {seal}).",
                    if *edge { "edge" } else { "OSDs" }
                )
            }
            Action::OsdOut { id } => format!(
                "Mark osd.{id} out: its placement groups move to the other OSDs, which \
                 recover their data (coffer osd out {id})."
            ),
            Action::OsdIn { id } => {
                format!("Mark osd.{id} in: it takes placement groups again (coffer osd in {id}).")
            }
            Action::UserCreate { name } => format!(
                "Create S3 user {name} with new keys, shown once (coffer user create {name})."
            ),
            Action::FsCreate { name } => format!(
                "Create file system {name} with its pools {name}.meta and {name}.data \
                 (coffer fs create {name})."
            ),
            Action::FsAuthorize {
                fs,
                entity,
                path,
                access,
            } => format!(
                "Give {entity} a key that mounts file system {fs} at {path} with access \
                 {access}; its keyring is shown once (coffer fs authorize {fs} {entity} \
                 {path} {access})."
            ),
            Action::KmsRotate { name } => format!(
                "Rotate KMS key {name}: a new version wraps new data keys, and the S3 \
                 gateway's data keys are rewrapped under it (coffer kms key rotate {name})."
            ),
        }
    }
}

/// What an action did, and what it shows once (keys, a keyring).
pub struct Done {
    pub outcome: Result<String, String>,
    pub shown_once: Option<String>,
}

fn failed(why: String) -> Done {
    Done {
        outcome: Err(why),
        shown_once: None,
    }
}

fn did(what: String) -> Done {
    Done {
        outcome: Ok(what),
        shown_once: None,
    }
}

/// Carries `action` out on `cluster`, as the CLI command it names does.
pub async fn run(cluster: &Cluster, conf: &Conf, action: &Action) -> Done {
    match action {
        Action::PoolCreate { name, pg_num, edge } => {
            if *edge && !crate::admin::mon_links_secure(conf).unwrap_or(false) {
                return failed(
                    "a pool sealed at the edge needs secure monitor links; choose osd".into(),
                );
            }
            match crate::admin::create_pool(cluster, name, *pg_num, *edge).await {
                Ok(()) => did(format!("pool {name} created")),
                Err(why) => failed(why),
            }
        }
        Action::OsdOut { id } | Action::OsdIn { id } => {
            let (change, state) = match action {
                Action::OsdOut { .. } => (Change::OsdOut { id: OsdId(*id) }, "out"),
                _ => (Change::OsdIn { id: OsdId(*id) }, "in"),
            };
            match cluster.command(MonCommand::Change(change)).await {
                Ok(_) => did(format!("osd.{id} marked {state}")),
                Err(e) => failed(e.to_string()),
            }
        }
        Action::UserCreate { name } => {
            let pool_name = crate::gw::pool_name(conf, None);
            let pool = match cluster.pool(&pool_name).await {
                Ok(pool) => pool,
                Err(e) => return failed(format!("the gateway's pool {pool_name}: {e}")),
            };
            match gateway::users::create(&pool, name).await {
                Ok(user) => {
                    let (id, secret) = user
                        .first_key()
                        .map(|k| (k.id.as_str(), k.secret.as_str()))
                        .unwrap_or_default();
                    let mut keys = format!("access key: {id}\nsecret key: {secret}\n");
                    if let Some(gw) = &conf.gw {
                        let ca = conf.dir.join(crate::gw::GW_DIR).join(gateway::tls::CA_FILE);
                        keys.push_str(&crate::gw::client_settings(gw, &ca, id, secret));
                    }
                    Done {
                        outcome: Ok(format!("S3 user {name} created")),
                        shown_once: Some(keys),
                    }
                }
                Err(e) => failed(e.to_string()),
            }
        }
        Action::FsCreate { name } => {
            let edge = match crate::admin::mon_links_secure(conf) {
                Ok(secure) => secure,
                Err(why) => return failed(why),
            };
            match crate::files::create(cluster, name, None, None, edge).await {
                Ok((meta, data)) => did(format!(
                    "file system {name} created: metadata in pool {meta}, files in pool {data}"
                )),
                Err(why) => failed(why),
            }
        }
        Action::FsAuthorize {
            fs,
            entity,
            path,
            access,
        } => {
            let granted = crate::files::grant_caps(cluster, fs, entity, path, access);
            let (caps_text, caps, path) = match granted {
                Ok(granted) => granted,
                Err(why) => return failed(why),
            };
            match crate::admin::new_key(cluster, entity, caps).await {
                Ok(pem) => {
                    let at = if path == "/" {
                        String::new()
                    } else {
                        format!(" --path {path}")
                    };
                    Done {
                        outcome: Ok(format!(
                            "{entity}: {caps_text}\nsave the keyring below as \
                             {entity}.keyring, then mount with: coffer --name {entity} \
                             --keyring {entity}.keyring mount {fs} MOUNTPOINT{at}"
                        )),
                        shown_once: Some(pem),
                    }
                }
                Err(why) => failed(why),
            }
        }
        Action::KmsRotate { name } => {
            let pool_name = crate::gw::pool_name(conf, None);
            // The rewrap's futures are not Send (they take async closures), so it runs to
            // its end on a blocking thread of the runtime, as the CLI runs it.
            let (cluster, name) = (cluster.clone(), name.clone());
            let runtime = tokio::runtime::Handle::current();
            // The page lists the monitors' keys, whatever KMS the gateway uses.
            let rotated = tokio::task::spawn_blocking(move || {
                let kms = gateway::kms::MonitorKms {
                    cluster: cluster.clone(),
                };
                runtime.block_on(crate::gw::rotate(&cluster, &kms, &name, &pool_name))
            })
            .await;
            match rotated {
                Ok(Ok(what)) => did(what),
                Ok(Err(why)) => failed(why),
                Err(e) => failed(format!("the rotation stopped: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn forms_become_actions_or_say_what_is_wrong() {
        let pool = form(&[
            ("action", "pool-create"),
            ("name", "web"),
            ("pg_num", "32"),
            ("seal", "edge"),
        ]);
        assert_eq!(
            Action::from_form(&pool),
            Ok(Action::PoolCreate {
                name: "web".into(),
                pg_num: 32,
                edge: true
            })
        );
        let out = form(&[("action", "osd-out"), ("osd", "osd.2")]);
        assert_eq!(Action::from_form(&out), Ok(Action::OsdOut { id: 2 }));
        let grant = form(&[
            ("action", "fs-authorize"),
            ("fs", "fs"),
            ("entity", "alice"),
            ("path", ""),
            ("access", "rw"),
        ]);
        assert_eq!(
            Action::from_form(&grant),
            Ok(Action::FsAuthorize {
                fs: "fs".into(),
                entity: "client.alice".into(),
                path: "/".into(),
                access: "rw".into()
            })
        );
        let zero = form(&[
            ("action", "pool-create"),
            ("name", "x"),
            ("pg_num", "0"),
            ("seal", "osd"),
        ]);
        assert!(Action::from_form(&zero).is_err());
        assert!(Action::from_form(&form(&[("action", "reboot")])).is_err());
        assert!(Action::from_form(&form(&[("action", "user-create")])).is_err());
    }

    #[test]
    fn each_confirmation_names_its_command() {
        let rotate = Action::KmsRotate {
            name: "backup".into(),
        };
        assert!(rotate.describe().contains("coffer kms key rotate backup"));
        let out = Action::OsdOut { id: 1 };
        assert!(out.describe().contains("coffer osd out 1"));
    }
}
