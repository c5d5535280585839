//! `sluice nats-config`: the nats-server config with the partition mapping.

use crate::common::Common;
use anyhow::{anyhow, bail, Context as _, Result};
use sluice_core::config::Config;
use sluice_core::nats_config::link::LINK_SEED_ENV;
use sluice_core::nats_config::{
    Cluster, LinkKey, LinkSeed, LinkTls, NatsServerConfig, Password, RegionLinks, Role, RoleUser,
};
use sluice_core::region::RegionName;

#[derive(clap::Args, Debug)]
pub struct NatsConfigArgs {
    /// Client listen address of the server.
    #[arg(long, default_value = "127.0.0.1:4222")]
    pub listen: String,
    /// Monitoring (HTTP) listen address; off unless given.
    #[arg(long)]
    pub http: Option<String>,
    /// Server name, unique per server among all linked regions (default
    /// sluice-nats, or sluice-<region> with a region).
    #[arg(long)]
    pub server_name: Option<String>,
    /// JetStream store directory.
    #[arg(long)]
    pub store_dir: Option<String>,
    /// Cluster name: print the cluster form (with --cluster-listen and --route).
    #[arg(long)]
    pub cluster_name: Option<String>,
    /// Cluster listen address (cluster form).
    #[arg(long, default_value = "0.0.0.0:6222")]
    pub cluster_listen: String,
    /// A route to another server of the cluster (repeatable), e.g. nats-route://n2:6222.
    #[arg(long = "route")]
    pub routes: Vec<String>,
    /// Add users `client`, `worker` and `admin` with the permissions of their
    /// roles (SPEC §10). Passwords come from SLUICE_AUTH_CLIENT_PASSWORD,
    /// SLUICE_AUTH_WORKER_PASSWORD and SLUICE_AUTH_ADMIN_PASSWORD; a role
    /// without one gets a generated password, written into the config and
    /// named once on stderr.
    #[arg(long)]
    pub auth: bool,
    /// With --auth: write each password as a reference to its variable
    /// (password: $SLUICE_AUTH_CLIENT_PASSWORD, ...), which nats-server
    /// resolves from its own environment when it loads the file, so the
    /// file holds no secret (compose.yaml runs this way). Such a password
    /// must start with a letter (nats-server reads 1234 as a number).
    #[arg(long, requires = "auth")]
    pub auth_from_env: bool,
    /// The region this server belongs to (SPEC §12; default: the
    /// config's `region`). It becomes the server's JetStream domain.
    #[arg(long)]
    pub region: Option<String>,
    /// Where this server accepts the other regions' links (leafnodes),
    /// host:port, e.g. 0.0.0.0:7422.
    #[arg(long)]
    pub link_listen: Option<String>,
    /// With --link-listen: the host:port other regions reconnect to, when
    /// they reach this server through a proxy or NAT.
    #[arg(long, requires = "link_listen")]
    pub link_advertise: Option<String>,
    /// Connect to REGION's link listener, REGION=URL (repeatable), e.g.
    /// east=nats-leaf://east-nats:7422. One side of each link is enough.
    /// With --auth the link authenticates with the nkey seed in
    /// SLUICE_AUTH_LINK_SEED (generated and named on stderr when unset;
    /// give the same seed to every region's servers).
    #[arg(long = "link")]
    pub links: Vec<String>,
    /// This server's certificate (PEM) for the link between regions: the
    /// listener presents it, and a connecting side shows it to a listener
    /// that asks (with --link-tls-key).
    #[arg(long)]
    pub link_tls_cert: Option<String>,
    /// The key of --link-tls-cert (PEM).
    #[arg(long)]
    pub link_tls_key: Option<String>,
    /// The CA (PEM) the other regions' link certificates are signed by: a
    /// listener then requires one from each region that connects (mutual
    /// TLS), and a connecting side verifies the listener's against it.
    #[arg(long)]
    pub link_tls_ca: Option<String>,
}

pub fn run(common: &Common, args: &NatsConfigArgs) -> Result<()> {
    let config = common.load_config()?;
    let mut server = NatsServerConfig::new(config.partitions);
    server.listen = args.listen.clone();
    server.http = args.http.clone();

    server.store_dir = args.store_dir.clone();
    server.usage_steps = config.usage.tiers.iter().map(|t| t.name()).collect();
    server.cluster = args.cluster_name.as_ref().map(|name| Cluster {
        name: name.clone(),
        listen: args.cluster_listen.clone(),
        routes: args.routes.clone(),
    });
    if args.auth_from_env {
        server.users = RoleUser::every(|_| Password::FromEnv);
    } else if args.auth {
        server.users = Role::ALL
            .into_iter()
            .map(|role| {
                let password = match std::env::var(role.password_env()) {
                    Ok(p) if !p.is_empty() => p,
                    _ => {
                        let p = generate_password()?;
                        eprintln!(
                            "sluice nats-config: generated the password of user {role}: {p} \
                             (set {} to choose it)",
                            role.password_env()
                        );
                        p
                    }
                };
                Ok(RoleUser {
                    role,
                    password: password.into(),
                })
            })
            .collect::<Result<_>>()?;
    }
    server.region = region_links(&config, args)?;
    server.server_name = match (&args.server_name, &server.region) {
        (Some(name), _) => name.clone(),
        (None, Some(links)) => format!("sluice-{}", links.region),
        (None, None) => "sluice-nats".to_string(),
    };
    print!("{}", server.render());
    Ok(())
}

/// The server's region and links, from `--region` (or the config's
/// `region`), `--link-listen` and `--link`.
fn region_links(config: &Config, args: &NatsConfigArgs) -> Result<Option<RegionLinks>> {
    let region = match &args.region {
        Some(name) => Some(RegionName::new(name).map_err(|e| anyhow!("--region: {e}"))?),
        None => config.region.clone(),
    };
    let Some(region) = region else {
        let tls = [&args.link_tls_cert, &args.link_tls_key, &args.link_tls_ca];
        if args.link_listen.is_some() || !args.links.is_empty() || tls.iter().any(|f| f.is_some()) {
            bail!(
                "--link-listen, --link and --link-tls-* need a region: give --region or set region in the config"
            );
        }
        return Ok(None);
    };
    let connect = args
        .links
        .iter()
        .map(|link| {
            let (name, url) = link.split_once('=').ok_or_else(|| {
                anyhow!("--link {link:?}: write REGION=URL, e.g. east=nats-leaf://east-nats:7422")
            })?;
            let name = RegionName::new(name).map_err(|e| anyhow!("--link {link:?}: {e}"))?;
            if name == region {
                bail!("--link {link:?}: a region does not link to itself");
            }
            if url.is_empty() {
                bail!("--link {link:?}: the URL is empty; e.g. nats-leaf://east-nats:7422");
            }
            Ok((name, url.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    let key = if args.auth && (args.link_listen.is_some() || !connect.is_empty()) {
        Some(link_key(args.auth_from_env)?)
    } else {
        None
    };
    let tls = LinkTls::new(
        args.link_tls_cert.clone(),
        args.link_tls_key.clone(),
        args.link_tls_ca.clone(),
        args.link_listen.is_some(),
        !connect.is_empty(),
    )?;
    Ok(Some(RegionLinks {
        region,
        listen: args.link_listen.clone(),
        advertise: args.link_advertise.clone(),
        connect,
        key,
        tls,
    }))
}

/// The link's nkey: from SLUICE_AUTH_LINK_SEED, or generated and named
/// once on stderr (every region's servers need the same seed).
fn link_key(from_env: bool) -> Result<LinkKey> {
    let seed = match std::env::var(LINK_SEED_ENV) {
        Ok(seed) if !seed.is_empty() => seed,
        _ if from_env => bail!(
            "--auth-from-env with links: set {LINK_SEED_ENV} (an nkey user seed, SU...) here too, to derive the public key the listening side names"
        ),
        _ => {
            let seed = nkeys::KeyPair::new_user()
                .seed()
                .context("cannot generate the link's nkey")?;
            eprintln!(
                "sluice nats-config: generated the link's nkey seed: {seed} (set {LINK_SEED_ENV} to choose it; every region's servers need the same)"
            );
            seed
        }
    };
    let pair = nkeys::KeyPair::from_seed(&seed)
        .map_err(|e| anyhow!("{LINK_SEED_ENV} is not an nkey user seed (SU...): {e}"))?;
    Ok(LinkKey {
        public: pair.public_key(),
        seed: if from_env {
            LinkSeed::FromEnv
        } else {
            LinkSeed::Literal(seed)
        },
    })
}

/// 128 random bits from the kernel, in hex: a password nobody guesses and
/// that needs no quoting anywhere (config, env, URL).
fn generate_password() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom to generate a password; set the SLUICE_AUTH_<ROLE>_PASSWORD variables")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
