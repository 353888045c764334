//! The dashboard's pages as HTML, from what the shell gathered: pure, so every page is
//! rendered the same way in a test as in the browser. Nothing here reads the cluster.

use std::fmt::Write;

use super::users::Role;

/// Text made safe for HTML (element content and quoted attributes).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Who looks at a page, and where.
pub struct Frame<'a> {
    pub path: &'a str,
    pub user: &'a str,
    pub role: Role,
    /// The session's form token, sent back by every form.
    pub form_token: &'a str,
    /// When the page's figures were gathered, for people.
    pub gathered: &'a str,
}

/// The pages of the navigation bar: path and title.
pub const PAGES: [(&str, &str); 8] = [
    ("/", "Health"),
    ("/osds", "OSDs"),
    ("/pools", "Pools"),
    ("/pgs", "Placement groups"),
    ("/images", "Images"),
    ("/s3", "S3"),
    ("/kms", "KMS keys"),
    ("/fs", "File systems"),
];

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}\
header{background:#1d2330;color:#fff;padding:.6em 1.2em;display:flex;gap:1.2em;align-items:center;flex-wrap:wrap}\
header a{color:#cfd6e4;text-decoration:none}header a.here{color:#fff;font-weight:600}\
header .who{margin-left:auto;font-size:.9em}main{padding:1em 1.5em}\
table{border-collapse:collapse;background:#fff;margin:.5em 0 1.2em}\
th,td{border:1px solid #d8dce3;padding:.3em .7em;text-align:left}th{background:#eceff4}\
.ok{color:#13795b}.warn{color:#b26b00}.err{color:#c0262d}\
.verdict{font-size:1.6em;font-weight:700}form.inline{display:inline}\
fieldset{background:#fff;border:1px solid #d8dce3;margin:.5em 0 1.2em;max-width:40em}\
label{display:block;margin:.3em 0}input,select{font:inherit}\
pre{background:#fff;border:1px solid #d8dce3;padding:.6em;white-space:pre-wrap;word-break:break-all}\
.chart{display:inline-block;margin:0 1em 1em 0;background:#fff;border:1px solid #d8dce3;padding:.4em}\
.chart svg text{font-size:11px;fill:#59606e}.chart .plot{fill:#fbfcfd}.legend{margin:.2em 0;font-size:.9em}\
.note{color:#59606e;font-size:.9em}";

/// A whole page: the navigation, who is logged in, and `body`.
pub fn layout(frame: &Frame, title: &str, body: &str) -> String {
    let mut nav = String::new();
    for (path, name) in PAGES {
        let here = if path == frame.path {
            " class=\"here\""
        } else {
            ""
        };
        let _ = write!(nav, "<a href=\"{path}\"{here}>{name}</a>");
    }
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>{title} - Coffer</title><style>{STYLE}</style></head><body>\
         <header><strong>Coffer</strong>{nav}<span class=\"who\">{user} ({role}) \
         <form class=\"inline\" method=\"post\" action=\"/logout\">\
         <input type=\"hidden\" name=\"form_token\" value=\"{token}\">\
         <button id=\"logout\">Log out</button></form></span></header>\
         <main><h1>{title}</h1>{body}<p class=\"note\">Gathered {gathered}.</p></main></body></html>",
        title = escape(title),
        user = escape(frame.user),
        role = frame.role.name(),
        token = escape(frame.form_token),
        gathered = escape(frame.gathered),
    )
}

/// The login page, with why the last attempt failed.
pub fn login(failed: Option<&str>) -> String {
    let failed = failed
        .map(|why| format!("<p class=\"err\" id=\"login-failed\">{}</p>", escape(why)))
        .unwrap_or_default();
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>Log in - Coffer</title><style>{STYLE}</style></head><body>\
         <header><strong>Coffer</strong></header><main><h1>Log in</h1>{failed}\
         <form method=\"post\" action=\"/login\"><fieldset>\
         <label>User <input name=\"user\" id=\"user\" autocomplete=\"username\" required></label>\
         <label>Password <input name=\"password\" id=\"password\" type=\"password\" \
         autocomplete=\"current-password\" required></label>\
         <button id=\"login\">Log in</button></fieldset></form>\
         <p class=\"note\">Users: <code>coffer dashboard user add NAME [--read-only]</code> on \
         the dashboard's host.</p></main></body></html>"
    )
}

/// A table of `rows` whose cells are HTML already, under `headers` (none when empty).
pub fn table(id: &str, headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut html = format!("<table id=\"{id}\">");
    if !headers.is_empty() {
        html.push_str("<tr>");
        for header in headers {
            let _ = write!(html, "<th>{}</th>", escape(header));
        }
        html.push_str("</tr>");
    }
    for row in rows {
        html.push_str("<tr>");
        for cell in row {
            let _ = write!(html, "<td>{cell}</td>");
        }
        html.push_str("</tr>");
    }
    html.push_str("</table>");
    html
}

/// One field of an action's form.
pub enum Field<'a> {
    /// Fixed, and not shown.
    Hidden(&'a str, &'a str),
    /// A text input: name, label, value.
    Text(&'a str, &'a str, &'a str),
    /// A choice: name, label, options (the first chosen).
    Choice(&'a str, &'a str, &'a [&'a str]),
}

/// A form that asks for `action` (an admin's only: read-only users see none), confirmed on
/// the next page.
pub fn action_form(frame: &Frame, action: &str, fields: &[Field], button: &str) -> String {
    if frame.role != Role::Admin {
        return String::new();
    }
    let mut html = format!(
        "<form class=\"action\" method=\"post\" action=\"/action\" data-action=\"{a}\">\
         <input type=\"hidden\" name=\"form_token\" value=\"{t}\">\
         <input type=\"hidden\" name=\"action\" value=\"{a}\">",
        a = escape(action),
        t = escape(frame.form_token)
    );
    let mut shown = false;
    for field in fields {
        match field {
            Field::Hidden(name, value) => {
                let _ = write!(
                    html,
                    "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
                    escape(name),
                    escape(value)
                );
            }
            Field::Text(name, label, value) => {
                shown = true;
                let _ = write!(
                    html,
                    "<label>{} <input name=\"{n}\" id=\"{a}-{n}\" value=\"{}\"></label>",
                    escape(label),
                    escape(value),
                    n = escape(name),
                    a = escape(action)
                );
            }
            Field::Choice(name, label, options) => {
                shown = true;
                let _ = write!(
                    html,
                    "<label>{} <select name=\"{n}\" id=\"{a}-{n}\">",
                    escape(label),
                    n = escape(name),
                    a = escape(action)
                );
                for option in options.iter() {
                    let _ = write!(html, "<option>{}</option>", escape(option));
                }
                html.push_str("</select></label>");
            }
        }
    }
    let _ = write!(html, "<button>{}</button></form>", escape(button));
    if shown {
        format!("<fieldset>{html}</fieldset>")
    } else {
        html.replace("<form class=\"action\"", "<form class=\"action inline\"")
    }
}

/// The page that asks an admin to confirm `what`, carrying the form's fields on.
pub fn confirm(frame: &Frame, what: &str, fields: &[(String, String)]) -> String {
    let mut hidden = String::new();
    for (name, value) in fields {
        if name == "confirm" {
            continue;
        }
        let _ = write!(
            hidden,
            "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
            escape(name),
            escape(value)
        );
    }
    let body = format!(
        "<p id=\"confirm-what\">{}</p><form method=\"post\" action=\"/action\">{hidden}\
         <input type=\"hidden\" name=\"confirm\" value=\"yes\">\
         <button id=\"confirm\">Confirm</button> <a href=\"javascript:history.back()\">Cancel</a>\
         </form>",
        escape(what)
    );
    layout(frame, "Confirm", &body)
}

/// The page after an action: what it did, and what is shown once (keys, a keyring).
pub fn done(frame: &Frame, outcome: &Result<String, String>, shown_once: Option<&str>) -> String {
    let mut body = match outcome {
        Ok(text) => format!("<pre id=\"outcome\" class=\"ok\">{}</pre>", escape(text)),
        Err(why) => format!("<pre id=\"outcome\" class=\"err\">{}</pre>", escape(why)),
    };
    if let Some(secret) = shown_once {
        let _ = write!(
            body,
            "<p class=\"warn\">Shown once: copy it now; the dashboard keeps no copy.</p>\
             <pre id=\"secret\">{}</pre>",
            escape(secret)
        );
    }
    layout(frame, "Done", &body)
}

/// A health word in its colour.
pub fn verdict(health: &str) -> String {
    let class = match health {
        "HEALTH_OK" => "ok",
        "HEALTH_WARN" => "warn",
        _ => "err",
    };
    format!(
        "<span class=\"verdict {class}\" id=\"verdict\">{}</span>",
        escape(health)
    )
}

/// A size in bytes for people (binary units, one decimal).
pub fn bytes(value: f64) -> String {
    crate::text::approximate(value.max(0.0) as u64)
}

/// A latency in seconds for people.
pub fn latency(seconds: f64) -> String {
    if seconds <= 0.0 {
        "-".into()
    } else if seconds < 1e-3 {
        format!("{:.0} µs", seconds * 1e6)
    } else if seconds < 1.0 {
        format!("{:.2} ms", seconds * 1e3)
    } else {
        format!("{seconds:.2} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(role: Role) -> Frame<'static> {
        Frame {
            path: "/pools",
            user: "ops<1>",
            role,
            form_token: "t0k",
            gathered: "now",
        }
    }

    #[test]
    fn text_from_the_cluster_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        let page = layout(&frame(Role::Admin), "Pools", "<p>body</p>");
        assert!(page.contains("ops&lt;1&gt; (admin)"));
        assert!(page.contains("<a href=\"/pools\" class=\"here\">Pools</a>"));
        assert!(page.contains("value=\"t0k\""));
    }

    #[test]
    fn only_admins_get_action_forms() {
        let fields = [
            Field::Text("name", "Name", ""),
            Field::Hidden("pg_num", "32"),
        ];
        let admin = action_form(&frame(Role::Admin), "pool-create", &fields, "Create");
        assert!(admin.contains("name=\"action\" value=\"pool-create\""));
        assert!(admin.contains("name=\"form_token\" value=\"t0k\""));
        assert!(admin.contains("id=\"pool-create-name\""));
        assert_eq!(
            action_form(&frame(Role::ReadOnly), "pool-create", &fields, "Create"),
            ""
        );
        let asked = confirm(
            &frame(Role::Admin),
            "Create pool x",
            &[
                ("name".into(), "x\"y".into()),
                ("confirm".into(), "no".into()),
            ],
        );
        assert!(asked.contains("name=\"name\" value=\"x&quot;y\""));
        assert!(asked.contains("name=\"confirm\" value=\"yes\""));
        assert!(!asked.contains("value=\"no\""));
    }

    #[test]
    fn sizes_and_latencies_read_as_people_say_them() {
        assert_eq!(bytes(3.5 * 1024.0 * 1024.0 * 1024.0), "3.5 GiB");
        assert_eq!(latency(0.0), "-");
        assert_eq!(latency(0.00025), "250 µs");
        assert_eq!(latency(0.0123), "12.30 ms");
    }
}
