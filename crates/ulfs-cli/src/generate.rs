//! Man pages and shell completions, made from the command line's own clap
//! definition (hidden commands `generate-man` and `generate-completions`,
//! which scripts/install.sh calls), so they say what `--help` says.

use std::path::Path;

use clap_complete::Shell;

use crate::error::{CliError, CliResult};

/// `ulfs.1` and one page per command (`ulfs-mkfs.1`, ...) into `dir`.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> CliResult {
    let ctx = format!("generate-man: {}", dir.display());
    std::fs::create_dir_all(dir).map_err(|e| CliError::io(&ctx, &e))?;
    clap_mangen::generate_to(cmd, dir).map_err(|e| CliError::io(&ctx, &e))
}

/// The completion script for `shell` into `dir`, under the name that
/// shell loads on demand (bash: `ulfs`, zsh: `_ulfs`, fish: `ulfs.fish`).
pub fn completions(mut cmd: clap::Command, shell: Shell, dir: &Path) -> CliResult {
    let ctx = format!("generate-completions: {}", dir.display());
    std::fs::create_dir_all(dir).map_err(|e| CliError::io(&ctx, &e))?;
    let written = clap_complete::generate_to(shell, &mut cmd, "ulfs", dir)
        .map_err(|e| CliError::io(&ctx, &e))?;
    // bash-completion looks a command's script up by the command's name.
    if shell == Shell::Bash {
        std::fs::rename(&written, dir.join("ulfs")).map_err(|e| CliError::io(&ctx, &e))?;
    }
    Ok(())
}
