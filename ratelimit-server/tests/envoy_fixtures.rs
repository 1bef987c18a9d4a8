//! Every configuration fixture of envoyproxy/ratelimit's own test suite (vendored under
//! tests/fixtures/envoy, see its README): the files its tests load are read here, and the files
//! its tests expect to be refused are refused, with the file, a line where the YAML reader knows
//! it, and the reference's reason.

use ratelimit_server::config::{ConfigError, Options};
use std::path::{Path, PathBuf};

/// Read as the reference reads it by default.
fn load(path: &Path) -> Result<ratelimit_server::config::Config, ConfigError> {
    ratelimit_server::config::load(path, &Options::default())
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/envoy")
}

fn every_fixture() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["test/config", "test/integration", "examples"] {
        for entry in std::fs::read_dir(fixtures().join(dir)).expect("the vendored fixtures") {
            out.push(entry.expect("a fixture").path());
        }
    }
    out.sort();
    out
}

/// The fixtures the reference refuses, and (a part of) its reason.
const REFUSED: [(&str, &str); 12] = [
    ("bad_limit_unit.yaml", "invalid rate limit unit 'foo'"),
    ("bad_yaml.yaml", ""),
    ("duplicate_key.yaml", "duplicate descriptor composite key 'test-domain.key1_value1'"),
    ("empty_domain.yaml", "config file cannot have empty domain"),
    ("empty_key.yaml", "descriptor has empty key"),
    ("misspelled_key.yaml", "unknown field `ratelimit`"),
    ("misspelled_key2.yaml", "unknown field `requestsperunit`"),
    ("non_map_list.yaml", ""),
    ("non_string_key.yaml", ""),
    ("replaces_empty.yaml", "should not have an empty replaces entry"),
    ("replaces_self.yaml", "replaces should not contain name of same descriptor"),
    ("unlimited_with_unit.yaml", "should not specify rate limit unit when unlimited"),
];

#[test]
fn every_fixture_is_read_as_the_reference_reads_it() {
    let (mut read, mut refused) = (Vec::new(), Vec::new());
    for file in every_fixture() {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let expected = REFUSED.iter().find(|(n, _)| *n == name);
        match (load(&file), expected) {
            (Ok(config), None) => {
                assert!(!config.domains.is_empty(), "{name}: no domain");
                read.push(name);
            }
            (Err(e), Some((_, reason))) => {
                assert!(e.file.ends_with(&name), "{e}");
                assert!(e.reason.contains(reason), "{name}: {e} (expected: {reason})");
                refused.push(format!("{e}"));
            }
            (Ok(_), Some(_)) => panic!("{name} should be refused"),
            (Err(e), None) => panic!("{name} should be read: {e}"),
        }
    }
    println!("read {} fixtures: {read:?}", read.len());
    println!("refused {} fixtures as the reference does:\n{}", refused.len(), refused.join("\n"));
    assert_eq!(read.len() + refused.len(), 26, "every vendored fixture");
    assert_eq!(refused.len(), REFUSED.len());
}

#[test]
fn refusals_name_the_line_where_the_reader_knows_it() {
    let e: ConfigError = load(&fixtures().join("test/config/misspelled_key.yaml")).unwrap_err();
    assert!(e.line.is_some(), "{e}");
    let e = load(&fixtures().join("test/config/bad_limit_unit.yaml")).unwrap_err();
    assert!(e.line.is_some() && e.to_string().contains("bad_limit_unit.yaml:"), "{e}");
}

/// Copies fixtures into a fresh directory, read as one configuration.
fn dir_of(files: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rls-fixtures-{}-{}", std::process::id(), files.join("+")));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    for f in files {
        std::fs::copy(fixtures().join("test/config").join(f), dir.join(f)).expect("copy");
    }
    dir
}

#[test]
fn a_domain_given_twice_in_a_directory_is_refused_as_the_reference_does() {
    let e = load(&dir_of(&["basic_config.yaml", "duplicate_domain.yaml"])).unwrap_err();
    assert!(e.reason.contains("duplicate domain 'test-domain'") && e.file.ends_with("duplicate_domain.yaml"), "{e}");
    // The reference merges these two only with MERGE_DOMAIN_CONFIG set; by default it refuses.
    let merged = dir_of(&["merge_domain_key1.yaml", "merge_domain_key2.yaml"]);
    let e = load(&merged).unwrap_err();
    assert!(e.reason.contains("duplicate domain"), "{e}");
    let merge = Options { merge_domains: true, ..Options::default() };
    let config = ratelimit_server::config::load(&merged, &merge).expect("merged");
    assert_eq!((config.domains.len(), config.limits), (1, 2));
    // Merging still refuses a descriptor given twice (the reference's TestDuplicateKeyDomainMerge).
    let twice = std::env::temp_dir().join(format!("rls-fixtures-{}-merge-twice", std::process::id()));
    let _ = std::fs::remove_dir_all(&twice);
    std::fs::create_dir_all(&twice).expect("temp dir");
    for copy in ["a.yaml", "b.yaml"] {
        std::fs::copy(fixtures().join("test/config/merge_domain_key1.yaml"), twice.join(copy)).expect("copy");
    }
    let e = ratelimit_server::config::load(&twice, &merge).unwrap_err();
    assert!(e.reason.contains("duplicate descriptor composite key 'test-domain.key1_value1'"), "{e}");
}
