//! Compile-time behaviour of `#[rate_limiter]`: the shapes it accepts (`ui/pass`, which also
//! run) and the errors it gives (`ui/fail`, compared with their `.stderr`). Regenerate the
//! expected output with `TRYBUILD=overwrite cargo test --test ui`, then read every diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
