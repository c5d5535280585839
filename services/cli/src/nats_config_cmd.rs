//! `sluice nats-config`: the nats-server config with the partition mapping.

use crate::common::Common;
use anyhow::{Context as _, Result};
use sluice_core::nats_config::{Cluster, NatsServerConfig, Password, Role, RoleUser};

#[derive(clap::Args, Debug)]
pub struct NatsConfigArgs {
    /// Client listen address of the server.
    #[arg(long, default_value = "127.0.0.1:4222")]
    pub listen: String,
    /// Monitoring (HTTP) listen address; off unless given.
    #[arg(long)]
    pub http: Option<String>,
    /// Server name (unique per server in a cluster).
    #[arg(long, default_value = "sluice-nats")]
    pub server_name: String,
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
    /// roles (CONTRACT §10). Passwords come from SLUICE_AUTH_CLIENT_PASSWORD,
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
}

pub fn run(common: &Common, args: &NatsConfigArgs) -> Result<()> {
    let config = common.load_config()?;
    let mut server = NatsServerConfig::new(config.partitions);
    server.listen = args.listen.clone();
    server.http = args.http.clone();
    server.server_name = args.server_name.clone();
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
    print!("{}", server.render());
    Ok(())
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
