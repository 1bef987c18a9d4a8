//! This test binary run again as a child process, to run one of its entry points: a test marked
//! `#[ignore]`, so that a plain `cargo test` lists it as ignored rather than counting it as
//! passed; the child runs it with `--ignored`. An entry point reads what its parent gives it
//! from the environment ([`given`]); run by hand (`cargo test -- --ignored`) it has nothing to do
//! and returns.

use std::process::Command;

/// The arguments that make this test binary run only `entry`, in the foreground, its output
/// not captured.
pub fn args(entry: &str) -> [&str; 6] {
    [entry, "--exact", "--ignored", "--nocapture", "--test-threads=1", "-q"]
}

/// This test binary's path.
pub fn exe() -> std::path::PathBuf {
    std::env::current_exe().expect("the test binary's path")
}

/// The command that runs this test binary's `entry` (an `#[ignore]`d test) as a child process.
pub fn command(entry: &str) -> Command {
    let mut cmd = Command::new(exe());
    cmd.args(args(entry));
    cmd
}

/// As [`command`], run through `wrapper` (`["faketime", "-f", "-1h"]`: the program and its
/// arguments, before the test binary's path).
pub fn command_under(wrapper: &[&str], entry: &str) -> Command {
    let (program, wrapper_args) = wrapper.split_first().expect("a wrapper program");
    let mut cmd = Command::new(program);
    cmd.args(wrapper_args).arg(exe()).args(args(entry));
    cmd
}

/// In an entry point: what the parent set in `var`, or `None` when the entry was run by hand.
pub fn given(var: &str) -> Option<String> {
    std::env::var(var).ok()
}
