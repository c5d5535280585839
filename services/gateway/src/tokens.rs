//! The API tokens in force: `--api-token` (full), `--api-read-token` (read
//! only) and the named tokens of `--api-tokens FILE`, each full or read
//! only, so that every caller (a team, a job, the dashboard's viewers) has
//! a token of its own, given and taken away without a restart.
//!
//! The file is TOML, one `[[token]]` table per token:
//!
//! ```toml
//! [[token]]
//! name = "billing"     # says whose it is in logs; unique
//! role = "full"        # or "read": usage, inspect, policies, alerts, status
//! token = "..."        # the bearer token itself
//! ```
//!
//! On SIGHUP the gateway reads the file again ([`Tokens::reload`]) and
//! replaces the whole set at once; requests in flight keep the set they
//! were checked with. A file that cannot be read or is not valid (a
//! missing field, an unknown role, a repeated name or token, no full token
//! left) is refused with the reason and the set in force stays: a typo
//! must not lock everyone out, or open every route.

use crate::api_token::{ApiToken, Role};
use crate::respond::{json_error, ErrorWord};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use serde::Deserialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// One token and what it may do.
#[derive(Clone, Debug)]
pub(crate) struct Named {
    pub(crate) name: String,
    pub(crate) token: ApiToken,
    pub(crate) role: Role,
}

/// A whole set of tokens, checked: at least one full token, names and
/// tokens each once.
#[derive(Debug)]
pub(crate) struct TokenSet(Vec<Named>);

impl TokenSet {
    fn new(tokens: Vec<Named>, from: &str) -> anyhow::Result<TokenSet> {
        let mut names = HashSet::new();
        for (i, named) in tokens.iter().enumerate() {
            if !names.insert(named.name.as_str()) {
                anyhow::bail!(
                    "{from}: the token name {:?} is given twice; give each token a name of its own",
                    named.name
                );
            }
            if tokens[..i]
                .iter()
                .any(|earlier| earlier.token == named.token)
            {
                anyhow::bail!(
                    "{from}: the tokens {:?} and {:?} are the same; give each its own value",
                    tokens[..i]
                        .iter()
                        .find(|e| e.token == named.token)
                        .map(|e| &e.name)
                        .unwrap(),
                    named.name
                );
            }
        }
        if !tokens.iter().any(|t| t.role == Role::Full) {
            anyhow::bail!(
                "{from}: no token has role \"full\"; give at least one (--api-token or a [[token]] \
                 with role = \"full\"), or nothing could ask, count or write"
            );
        }
        Ok(TokenSet(tokens))
    }

    /// The token `authorization` (`Bearer <token>`) carries, if it is one
    /// of these. Every token is compared, in constant time each, so the
    /// time taken does not tell which one was close.
    pub(crate) fn find(&self, authorization: Option<&[u8]>) -> Option<&Named> {
        let mut found = None;
        for named in &self.0 {
            if named.token.admits(authorization) && found.is_none() {
                found = Some(named);
            }
        }
        found
    }

    /// The role of the token `given` typed into the dashboard's login
    /// form, if it is one of these (every token compared, as in [`find`]).
    ///
    /// [`find`]: TokenSet::find
    pub(crate) fn role_of(&self, given: &[u8]) -> Option<Role> {
        let mut found = None;
        for named in &self.0 {
            if named.token.is(given) && found.is_none() {
                found = Some(named.role);
            }
        }
        found
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// The set in force, replaced whole by [`Tokens::reload`].
#[derive(Debug)]
pub struct Tokens {
    flags: Vec<Named>,
    file: Option<PathBuf>,
    now: RwLock<Arc<TokenSet>>,
}

impl Tokens {
    /// The tokens of the flags and of `file`; `None` when there are none
    /// (every route open). An error names the flag or the file and what
    /// to change.
    pub(crate) fn load(
        full: Option<ApiToken>,
        read: Option<ApiToken>,
        file: Option<&Path>,
    ) -> anyhow::Result<Option<Tokens>> {
        if full.is_none() && read.is_some() && file.is_none() {
            anyhow::bail!(
                "a read token (--api-read-token) needs the full token (--api-token) too: without it every route is open"
            );
        }
        let mut flags = Vec::new();
        if let Some(token) = full {
            flags.push(Named {
                name: "--api-token".into(),
                token,
                role: Role::Full,
            });
        }
        if let Some(token) = read {
            flags.push(Named {
                name: "--api-read-token".into(),
                token,
                role: Role::Read,
            });
        }
        if flags.is_empty() && file.is_none() {
            return Ok(None);
        }
        let tokens = Tokens {
            flags,
            file: file.map(Path::to_path_buf),
            now: RwLock::new(Arc::new(TokenSet(Vec::new()))),
        };
        let set = tokens.read()?;
        tokens.replace(set);
        Ok(Some(tokens))
    }

    /// The set in force now.
    pub(crate) fn now(&self) -> Arc<TokenSet> {
        self.now.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads the file again and puts its tokens in force; on any error
    /// the set in force stays, and the error says why.
    pub fn reload(&self) -> anyhow::Result<usize> {
        let set = self.read()?;
        let n = set.len();
        self.replace(set);
        Ok(n)
    }

    /// Whether there is a file to reload.
    pub fn has_file(&self) -> bool {
        self.file.is_some()
    }

    fn replace(&self, set: TokenSet) {
        *self.now.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(set);
    }

    fn read(&self) -> anyhow::Result<TokenSet> {
        let mut all = self.flags.clone();
        let from = match &self.file {
            Some(path) => {
                all.extend(read_file(path)?);
                format!(
                    "the token file {} (--api-tokens) with the token flags",
                    path.display()
                )
            }
            None => "the token flags".to_string(),
        };
        TokenSet::new(all, &from)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    token: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    role: FileRole,
    token: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum FileRole {
    Full,
    Read,
}

fn read_file(path: &Path) -> anyhow::Result<Vec<Named>> {
    let what = || format!("the token file {} (--api-tokens)", path.display());
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", what()))?;
    let file: File = toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a valid token file: {}; write one [[token]] table per token with \
             name, role (\"full\" or \"read\") and token",
            what(),
            e.message()
        )
    })?;
    let mut tokens = Vec::with_capacity(file.token.len());
    for entry in file.token {
        if entry.name.trim().is_empty() || entry.token.trim().is_empty() {
            anyhow::bail!(
                "{}: a [[token]] has an empty name or token; give both",
                what()
            );
        }
        if entry.token.trim() != entry.token {
            anyhow::bail!(
                "{}: the token {:?} starts or ends with spaces; remove them",
                what(),
                entry.name
            );
        }
        let role = match entry.role {
            FileRole::Full => Role::Full,
            FileRole::Read => Role::Read,
        };
        tokens.push(Named {
            name: entry.name,
            token: ApiToken::new(entry.token),
            role,
        });
    }
    Ok(tokens)
}

/// The tokens `/v1/*` checks, and what the routes behind one layer need.
#[derive(Clone, Debug)]
pub(crate) struct Gate {
    pub(crate) tokens: Arc<Tokens>,
    pub(crate) role: Role,
}

/// The middleware on `/v1/*`.
pub(crate) async fn require(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    let found = gate
        .tokens
        .now()
        .find(authorization)
        .map(|named| named.role);
    match found {
        Some(Role::Full) => next.run(request).await,
        Some(Role::Read) if gate.role == Role::Read => next.run(request).await,
        Some(Role::Read) => json_error(
            StatusCode::FORBIDDEN,
            ErrorWord::Forbidden,
            "this token may only read (--api-read-token, or role \"read\" in --api-tokens): usage, \
             inspect, policies, alerts and status; asking, counting, resetting and writing policies \
             need a full token",
        ),
        None => {
            let mut response = json_error(
                StatusCode::UNAUTHORIZED,
                ErrorWord::Unauthorized,
                "this gateway needs an API token: send the header `Authorization: Bearer <token>` \
                 with a token it was given (--api-token / SLUICE_API_TOKEN, or --api-tokens FILE)",
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"sluice\""),
            );
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token file with `text`, removed on drop.
    fn file(text: &str) -> tempfile::TempPath {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f.into_temp_path()
    }

    const TWO: &str = r#"
[[token]]
name = "billing"
role = "full"
token = "b-secret"

[[token]]
name = "viewers"
role = "read"
token = "v-secret"
"#;

    fn bearer(token: &str) -> Vec<u8> {
        format!("Bearer {token}").into_bytes()
    }

    #[test]
    fn a_file_gives_named_tokens_their_roles_beside_the_flags() {
        let f = file(TWO);
        let tokens = Tokens::load(Some(ApiToken::new("flag")), None, Some(&*f))
            .unwrap()
            .unwrap();
        let set = tokens.now();
        let role = |t: &str| set.find(Some(&bearer(t))).map(|n| (n.name.clone(), n.role));
        assert_eq!(role("b-secret"), Some(("billing".into(), Role::Full)));
        assert_eq!(role("v-secret"), Some(("viewers".into(), Role::Read)));
        assert_eq!(role("flag"), Some(("--api-token".into(), Role::Full)));
        assert_eq!(role("nope"), None);
        assert_eq!(set.role_of(b"b-secret"), Some(Role::Full));
        assert_eq!(set.role_of(b"v-secret"), Some(Role::Read));
        assert_eq!(set.role_of(b"nope"), None);
    }

    #[test]
    fn a_bad_file_on_reload_keeps_the_tokens_in_force() {
        let f = file(TWO);
        let tokens = Tokens::load(None, None, Some(&*f)).unwrap().unwrap();
        for (bad, why) in [
            ("[[token]]\nname = \"a\"\nrole = \"admin\"\ntoken = \"x\"\n", "not a valid token file"),
            ("[[token]]\nname = \"a\"\nrole = \"full\"\n", "not a valid token file"),
            ("[[token]]\nname = \"a\"\nrole = \"read\"\ntoken = \"x\"\n", "no token has role"),
            ("", "no token has role"),
            (
                "[[token]]\nname = \"a\"\nrole = \"full\"\ntoken = \"x\"\n[[token]]\nname = \"a\"\nrole = \"read\"\ntoken = \"y\"\n",
                "given twice",
            ),
            (
                "[[token]]\nname = \"a\"\nrole = \"full\"\ntoken = \"x\"\n[[token]]\nname = \"b\"\nrole = \"read\"\ntoken = \"x\"\n",
                "are the same",
            ),
            ("[[token]]\nname = \"a\"\nrole = \"full\"\ntoken = \"\"\n", "empty name or token"),
        ] {
            std::fs::write(&*f, bad).unwrap();
            let e = tokens.reload().unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
            assert!(tokens.now().find(Some(&bearer("b-secret"))).is_some(), "{bad:?}");
        }
        std::fs::remove_file(&*f).unwrap();
        let e = tokens.reload().unwrap_err().to_string();
        assert!(e.contains("cannot read the token file"), "{e}");
        std::fs::write(
            &*f,
            "[[token]]\nname = \"n\"\nrole = \"full\"\ntoken = \"new\"\n",
        )
        .unwrap();
        assert_eq!(tokens.reload().unwrap(), 1);
        assert!(tokens.now().find(Some(&bearer("b-secret"))).is_none());
        assert!(tokens.now().find(Some(&bearer("new"))).is_some());
    }

    #[test]
    fn a_read_token_alone_is_refused_and_no_token_is_no_gate() {
        let e = Tokens::load(None, Some(ApiToken::new("r")), None).unwrap_err();
        assert!(e.to_string().contains("needs the full token"), "{e}");
        assert!(Tokens::load(None, None, None).unwrap().is_none());
        let e = Tokens::load(Some(ApiToken::new("x")), Some(ApiToken::new("x")), None).unwrap_err();
        assert!(e.to_string().contains("are the same"), "{e}");
    }
}
