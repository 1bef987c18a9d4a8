//! Reading the files: a YAML file, or every `*.yaml` / `*.yml` file of a directory (hidden
//! entries skipped: Kubernetes keeps its previous ConfigMap versions there), compiled into a
//! [`Config`]. And the [`Fingerprint`] the watcher compares to notice a change.

use super::yaml::{self, Descriptor};
use super::{Config, ConfigError, LimitSpec, Node, Options};
use crate::proto::Unit;
use ratelimit::Rule;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// The files of `path` (itself, or a directory's YAML files, sorted by name).
fn files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let refused = |reason: String| ConfigError { file: path.display().to_string(), line: None, column: None, reason };
    let meta = std::fs::metadata(path).map_err(|e| refused(e.to_string()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| refused(e.to_string()))? {
        let entry = entry.map_err(|e| refused(e.to_string()))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let is_yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        // A directory named `x.yaml` is not a file to read (metadata follows symlinks).
        if is_yaml && !name.starts_with('.') && std::fs::metadata(entry.path()).is_ok_and(|m| m.is_file()) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// What the watcher compares: each file with its length and modification time.
pub type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// The current [`Fingerprint`] of `path` (an unreadable path: empty).
pub fn fingerprint(path: &Path) -> Fingerprint {
    let files = files(path).unwrap_or_default();
    files
        .into_iter()
        .map(|f| {
            let meta = std::fs::metadata(&f).ok();
            let len = meta.as_ref().map_or(0, |m| m.len());
            let modified = meta.and_then(|m| m.modified().ok());
            (f, len, modified)
        })
        .collect()
}

/// Reads and compiles every file of `path`; the first refused file refuses the whole.
pub fn load(path: &Path, options: &Options) -> Result<Config, ConfigError> {
    let mut config = Config::default();
    let mut next_id = 0;
    let mut store: Option<ratelimit::store::StoreHandle> = None;
    for file in files(path)? {
        let name = file.display().to_string();
        let text = std::fs::read_to_string(&file).map_err(|e| ConfigError {
            file: name.clone(),
            line: None,
            column: None,
            reason: e.to_string(),
        })?;
        let parsed: yaml::File = serde_yaml_ng::from_str(&text).map_err(|e| {
            let at = e.location();
            // The reader's message ends with its own "at line L column C": the fields say it.
            let reason = e.to_string();
            let reason = match reason.rfind(" at line ") {
                Some(i) if at.is_some() => reason[..i].to_owned(),
                _ => reason,
            };
            ConfigError {
                file: name.clone(),
                line: at.as_ref().map(|l| l.line()),
                column: at.as_ref().map(|l| l.column()),
                reason,
            }
        })?;
        let refuse = |reason: String| ConfigError { file: name.clone(), line: None, column: None, reason };
        if parsed.domain.is_empty() {
            return Err(refuse("config file cannot have empty domain".into()));
        }
        // A domain given again adds its descriptors to the first file's, when merging is on.
        let mut root = match config.domains.remove(&parsed.domain) {
            Some(_) if !options.merge_domains => {
                return Err(refuse(format!("duplicate domain '{}' in config file", parsed.domain)))
            }
            Some(root) => root,
            None => Node::default(),
        };
        let store = store.get_or_insert_with(|| Arc::new(ratelimit::store::MemoryStore::new()));
        let mut build = Build {
            domain: &parsed.domain,
            store: store.clone(),
            next_id: &mut next_id,
            limits: &mut config.limits,
            shadow: options.shadow,
        };
        build.level(&mut root, &parsed.domain, parsed.descriptors.unwrap_or_default()).map_err(refuse)?;
        config.domains.insert(parsed.domain, root);
    }
    Ok(config)
}

struct Build<'a> {
    domain: &'a str,
    /// Where the limits are built to be checked (never decided with).
    store: ratelimit::store::StoreHandle,
    next_id: &'a mut usize,
    limits: &'a mut usize,
    /// Every limit in shadow mode.
    shadow: bool,
}

impl Build<'_> {
    fn level(&mut self, node: &mut Node, parent: &str, descriptors: Vec<Descriptor>) -> Result<(), String> {
        for d in descriptors {
            let key = if d.value.is_empty() { d.key.clone() } else { format!("{}_{}", d.key, d.value) };
            let path = format!("{parent}.{key}");
            if node.children.contains_key(&key) {
                return Err(format!("duplicate descriptor composite key '{path}'"));
            }
            let mut child = Node { limit: self.limit(&d, &path)?, ..Node::default() };
            if key.contains('*') {
                let parts = key.split('*').map(str::to_owned).collect();
                node.wildcards.push((key.clone(), parts, d.share_threshold));
            }
            self.level(&mut child, &path, d.descriptors)?;
            node.children.insert(key, child);
        }
        Ok(())
    }

    fn limit(&mut self, d: &Descriptor, path: &str) -> Result<Option<Arc<LimitSpec>>, String> {
        let Some(rl) = &d.rate_limit else {
            if !d.more_rules.is_empty() {
                return Err(format!("'{path}': `rate_limits` extends a `rate_limit`: give that first"));
            }
            return Ok(None);
        };
        let specs: Vec<&yaml::RuleSpec> = rl.rule.iter().chain(&d.more_rules).collect();
        let refuse_all = specs.iter().any(|s| s.count == 0);
        let mut rules = Vec::with_capacity(specs.len());
        if !refuse_all {
            for s in &specs {
                let rule = Rule::new(s.window, u64::from(s.count)).map_err(|e| format!("'{path}': {e}"))?;
                if rules.contains(&rule) {
                    return Err(format!("'{path}': the rule {} per {:?} is given twice", s.count, s.window));
                }
                rules.push(rule);
            }
        }
        let shown = match specs.first() {
            Some(s) => {
                let name =
                    if rl.name.is_empty() && s.unit.is_none() { format!("{:?}", s.window) } else { rl.name.clone() };
                (s.count, s.unit.unwrap_or(Unit::Unknown), name)
            }
            None => (0, Unit::Unknown, rl.name.clone()),
        };
        let limiter = d.limiter.clone().unwrap_or_else(|| format!("rls:{}", self.domain));
        let id = *self.next_id;
        *self.next_id += 1;
        *self.limits += 1;
        let spec = LimitSpec {
            id,
            path: path.to_owned(),
            rules: (!rl.unlimited).then_some(rules),
            shown,
            refuse_all,
            algorithm: d.algorithm,
            burst: d.burst,
            shadow: d.shadow_mode || self.shadow,
            name: rl.name.clone(),
            replaces: rl.replaces.clone(),
            detailed_metric: d.detailed_metric,
            limiter,
            limit_type: d.limit_type,
            counters: ["ok", "over_limit"].map(|code| {
                let labels = [("descriptor", path.to_owned()), ("code", code.to_owned())];
                metrics::counter!("ratelimit_server_descriptors_total", &labels)
            }),
        };
        // What the library refuses (a burst where no bucket takes one, …) is refused here, with
        // the file, rather than on the first request.
        if let (Some(limit), false) = (spec.limit(), spec.refuse_all) {
            ratelimit::Limiter::builder(spec.limiter.clone())
                .limit(limit)
                .store(self.store.clone())
                .build()
                .map_err(|e| format!("'{path}': {e}"))?;
        }
        Ok(Some(Arc::new(spec)))
    }
}
