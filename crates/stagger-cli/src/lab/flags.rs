//! A URL query as command-line flags: `burst=400&server_skips_expired=1`
//! becomes `--burst=400 --server-skips-expired`, parsed by the subcommand's
//! own clap definition, so a flag the subcommand gains works in the lab's
//! API the day it lands, with the same validation and messages. The lab
//! itself knows no clap: it hands this module the query.

use clap::{ArgAction, Command, FromArgMatches};
use stagger_lab::{pairs, BadParam, REFUSED};

/// Parses the query with the clap definition `A` of subcommand `name`.
/// Parameters in `refused` (say `out`, which would write files) are
/// refused; so is any name the subcommand does not know.
pub fn parse<A: clap::Args + FromArgMatches>(
    name: &'static str,
    query: &str,
    refused: &[&str],
) -> Result<A, BadParam> {
    let cmd = A::augment_args(
        Command::new(name)
            .no_binary_name(true)
            .disable_help_flag(true)
            .disable_version_flag(true),
    );
    let mut argv: Vec<String> = Vec::new();
    for (key, value) in pairs(query)? {
        let flag = key.replace('_', "-");
        let param = flag.replace('-', "_");
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(flag.as_str()))
            .filter(|_| !refused.contains(&param.as_str()))
            .ok_or_else(|| {
                BadParam::new(
                    param.clone(),
                    format!("`{key}` is not a parameter of {name} here"),
                )
            })?;
        if matches!(arg.get_action(), ArgAction::SetTrue) {
            match value.as_str() {
                "" | "1" | "true" | "on" | "yes" => argv.push(format!("--{flag}")),
                "0" | "false" | "off" | "no" => {}
                v => {
                    return Err(BadParam::new(
                        param,
                        format!("`{v}` is not a switch value; write 1 or 0"),
                    ))
                }
            }
        } else {
            argv.push(format!("--{flag}={value}"));
        }
    }
    let matches = cmd.try_get_matches_from(&argv).map_err(clap_error)?;
    A::from_arg_matches(&matches).map_err(clap_error)
}

/// The first line of clap's message, with the parameter it names.
fn clap_error(e: clap::Error) -> BadParam {
    let parameter = match e.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(s)) => s
            .trim_start_matches('-')
            .split([' ', '='])
            .next()
            .unwrap_or("")
            .replace('-', "_"),
        _ => String::new(),
    };
    let text = e.render().to_string();
    let line = text.lines().next().unwrap_or("").trim();
    let line = line.strip_prefix("error: ").unwrap_or(line);
    BadParam::new(parameter, line)
}

/// Parses a URL query with the clap definition `A` of subcommand `name`,
/// refusing the parameters the lab refuses ([`REFUSED`]: they write files
/// or change only the command line's output).
pub fn flags<A: clap::Args + FromArgMatches>(
    name: &'static str,
    query: &str,
) -> Result<A, BadParam> {
    parse(name, query, REFUSED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, clap::Args)]
    struct Demo {
        #[arg(long)]
        burst: Option<u32>,
        #[arg(long)]
        server_skips_expired: bool,
        #[arg(long)]
        out: Option<String>,
    }

    #[test]
    fn switches_and_values_become_flags() {
        let d: Demo = parse("demo", "burst=7&server_skips_expired=1", &[]).unwrap();
        assert_eq!(d.burst, Some(7));
        assert!(d.server_skips_expired);
        let d: Demo = parse("demo", "server-skips-expired=0", &[]).unwrap();
        assert!(!d.server_skips_expired);
    }

    #[test]
    fn bad_values_name_the_parameter() {
        let e = parse::<Demo>("demo", "burst=lots", &[]).unwrap_err();
        assert_eq!(e.parameter(), "burst");
        assert!(e.message().contains("lots"), "{}", e.message());
        let e = parse::<Demo>("demo", "bursts=1", &[]).unwrap_err();
        assert_eq!(e.parameter(), "bursts");
        let e = parse::<Demo>("demo", "out=/tmp/x", &["out"]).unwrap_err();
        assert_eq!(e.parameter(), "out");
        let e = parse::<Demo>("demo", "burst=1&burst=2", &[]).unwrap_err();
        assert_eq!(e.parameter(), "burst", "{}", e.message());
        let e = parse::<Demo>("demo", "server_skips_expired=maybe", &[]).unwrap_err();
        assert_eq!(e.parameter(), "server_skips_expired");
    }
}
