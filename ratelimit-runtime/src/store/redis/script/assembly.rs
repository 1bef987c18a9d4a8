//! How the decision scripts are assembled from their parts, and the test that keeps the
//! checked-in scripts (lua/decide*.lua, which the runtime sends as they are) equal to what their
//! parts (lua/parts/) assemble into.
//!
//! A script's skeleton is the part of its own name; each line of a part that is exactly
//! `--@name` (after indentation) stands for the part `name.lua`, indented as the line is, and a
//! part may name parts of its own. The parts are written once and shared where two scripts do the
//! same step; the assembled files are what a reader (and the server) reads whole.
//!
//! After editing a part, re-assemble with
//! `RATELIMIT_ASSEMBLE_SCRIPTS=1 cargo test -p ratelimit-runtime --lib scripts`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The scripts `EVALSHA` sends, each assembled from the part of the same name.
const SCRIPTS: [&str; 3] = ["decide.lua", "decide_sw_batch.lua", "decide_o1_batch.lua"];

/// The command that rewrites the assembled scripts from their parts.
const REASSEMBLE: &str = "RATELIMIT_ASSEMBLE_SCRIPTS=1 cargo test -p ratelimit-runtime --lib scripts";

fn lua_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/redis/lua")
}

/// The part a line stands for, if it is a marker: `--@name` alone on its line.
fn marker(line: &str) -> Option<&str> {
    let name = line.trim().strip_prefix("--@")?;
    let valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    valid.then_some(name)
}

/// Appends the part `name`, its markers replaced, each line indented by `indent`. `stack`: the
/// parts being spliced (a part that names itself, directly or not, is an error); `used`: every
/// part spliced so far.
fn splice(name: &str, indent: &str, stack: &mut Vec<String>, used: &mut BTreeSet<String>, out: &mut String) {
    assert!(!stack.iter().any(|s| s == name), "part {name}.lua names itself: {stack:?}");
    let path = lua_dir().join("parts").join(format!("{name}.lua"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    stack.push(name.to_owned());
    used.insert(name.to_owned());
    for line in text.lines() {
        match marker(line) {
            Some(part) => {
                let inner = format!("{indent}{}", &line[..line.len() - line.trim_start().len()]);
                out.push_str(&format!("{inner}-- parts/{part}.lua\n"));
                splice(part, &inner, stack, used, out);
            }
            None if line.is_empty() => out.push('\n'),
            None => {
                out.push_str(indent);
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    stack.pop();
}

/// The script `file` as its parts assemble it; adds the parts it uses to `used`.
fn assemble(file: &str, used: &mut BTreeSet<String>) -> String {
    let name = file.trim_end_matches(".lua");
    let mut out = format!(
        "-- Assembled by store/redis/script/assembly.rs from lua/parts/{file}, each line\n\
         -- `--@name` of a part replaced by a comment naming lua/parts/name.lua, then that part.\n\
         -- Edit the parts, not this file, then re-assemble:\n\
         --     {REASSEMBLE}\n\
         \n"
    );
    splice(name, "", &mut Vec::new(), used, &mut out);
    out
}

#[test]
fn assembled_scripts_match_their_parts() {
    let rewrite = std::env::var("RATELIMIT_ASSEMBLE_SCRIPTS").is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    let mut used = BTreeSet::new();
    for file in SCRIPTS {
        let assembled = assemble(file, &mut used);
        let path = lua_dir().join(file);
        if fs::read_to_string(&path).ok().as_deref() != Some(assembled.as_str()) {
            if rewrite {
                fs::write(&path, &assembled).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            } else {
                stale.push(file);
            }
        }
    }
    assert!(stale.is_empty(), "{stale:?} differ from what lua/parts/ assembles: re-assemble with\n    {REASSEMBLE}");
    // A part no script names would be edited in vain.
    let parts = fs::read_dir(lua_dir().join("parts")).expect("lua/parts");
    let unused: Vec<String> = parts
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.strip_suffix(".lua").map(str::to_owned))
        .filter(|part| !used.contains(part))
        .collect();
    assert!(unused.is_empty(), "parts no script uses: {unused:?}");
}
