//! Runtime overrides from the limiter's side: the requests that set, clear and list one
//! subject's override ([`SetOverride`], [`ClearOverride`], [`ListOverrides`]), run with `.await`
//! or `.blocking()` as every request is, and what a decision does with them: it decides with
//! the overrides this process knows of, and its store call checks that they are the ones in
//! force (see docs/design.md, "Runtime overrides").

use super::Limiter;
use crate::error::{BuildError, OverrideError, StoreError};
use crate::model::compiled::CompiledLimit;
use crate::model::limit_type::LimitType;
use crate::model::overriding::{checked_rules, checked_ttl, encode_rules, index_field, read_index, Override};
use crate::model::rule::Rule;
use crate::model::subject::{with_key_text, Subject};
use crate::rt::io;
use crate::store::{Answer, IndexEntries, OverrideWrite, INTERNAL};
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

impl Limiter {
    /// Gives `subject` these rules in place of the limit's own, in every process deciding on
    /// this limiter's store, from their next call: see [`SetOverride`] for its TTL and which
    /// limit it overrides. Only limiters that honour overrides decide with them
    /// ([`LimiterBuilder::runtime_overrides`](crate::LimiterBuilder::runtime_overrides),
    /// [`Config::runtime_overrides`](crate::Config::runtime_overrides)).
    ///
    /// ```
    /// use ratelimit_runtime::{Limit, LimitType, Limiter, Rule, Subject, store::MemoryStore};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// let search = Limiter::builder("search")
    ///     .limit(Limit::new(LimitType::User, [Rule::new(Duration::from_secs(60), 1).unwrap()]))
    ///     .runtime_overrides(true)
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let alice = Subject::bytes(&b"alice"[..]);
    /// search.check(&[alice.clone()]).blocking().unwrap();
    /// assert!(search.check(&[alice.clone()]).blocking().is_err());
    /// // Alice bought more: 3 a minute for the next hour. Her call counts carry over.
    /// let raised = [Rule::new(Duration::from_secs(60), 3).unwrap()];
    /// search.set_override(&alice, raised).ttl(Duration::from_secs(3600)).blocking().unwrap();
    /// search.check(&[alice.clone()]).blocking().unwrap();
    /// search.check(&[alice.clone()]).blocking().unwrap();
    /// assert!(search.check(&[alice.clone()]).blocking().is_err());
    /// assert_eq!(search.overrides().blocking().unwrap().len(), 1);
    /// search.clear_override(&alice).blocking().unwrap();
    /// assert!(search.overrides().blocking().unwrap().is_empty());
    /// ```
    pub fn set_override(&self, subject: &Subject<'_>, rules: impl IntoIterator<Item = Rule>) -> SetOverride<'_> {
        SetOverride { target: Target::new(self, subject), rules: rules.into_iter().collect(), ttl: None }
    }

    /// Ends `subject`'s override (see [`set_override`](Self::set_override)): every process
    /// decides with the limit's own rules from its next call. Clearing none is no error.
    pub fn clear_override(&self, subject: &Subject<'_>) -> ClearOverride<'_> {
        ClearOverride { target: Target::new(self, subject) }
    }

    /// This limiter's overrides in force, in no particular order.
    pub fn overrides(&self) -> ListOverrides<'_> {
        ListOverrides { limiter: self }
    }

    /// The limit an override of `limit_type` (else: of the first rate limit counted per
    /// subject, else the first rate limit) is keyed by.
    fn override_limit(&self, limit_type: Option<LimitType>) -> Result<&CompiledLimit, BuildError> {
        let limits = &self.own().limits;
        let rate = |l: &&CompiledLimit| !l.is_concurrency();
        let found = match limit_type {
            Some(t) => limits.iter().filter(rate).find(|l| l.limit_type == t),
            None => limits
                .iter()
                .filter(rate)
                .find(|l| l.limit_type != LimitType::Global)
                .or_else(|| limits.iter().find(rate)),
        };
        found.ok_or(BuildError::NoLimitToOverride(limit_type.unwrap_or(LimitType::Global).as_str()))
    }
}

/// Which subject of which limiter an override concerns.
#[derive(Clone, Debug)]
struct Target<'l> {
    limiter: &'l Limiter,
    subject: Option<Vec<u8>>,
    limit_type: Option<LimitType>,
}

impl<'l> Target<'l> {
    fn new(limiter: &'l Limiter, subject: &Subject<'_>) -> Target<'l> {
        Target { limiter, subject: subject.key_bytes().map(<[u8]>::to_vec), limit_type: None }
    }

    /// Writes the override (`rules`: its encoded rules; `None`: clears it).
    fn write(&self, rules: Result<Option<(Vec<u8>, u64)>, BuildError>) -> Result<Answer<()>, BuildError> {
        let rules = rules?;
        let limit = self.limiter.override_limit(self.limit_type)?;
        // A missing subject (`Subject::missing`) has no override: there is nothing it names.
        let subject = self.subject.as_deref().ok_or(BuildError::NoLimitToOverride("missing subject"))?;
        let key = limit.override_key(subject);
        let field = with_key_text(subject, |text| index_field(limit.limit_type, text));
        let (encoded, ttl_ms) = match &rules {
            Some((encoded, ttl_ms)) => (Some(&encoded[..]), *ttl_ms),
            None => (None, 0),
        };
        let write = OverrideWrite { key: &key, index: &limit.override_index, field: &field, rules: encoded, ttl_ms };
        Ok(self.limiter.store().write_override(&write))
    }
}

/// Sets one subject's runtime override ([`Limiter::set_override`]): `.await` it, or run it with
/// [`blocking`](Self::blocking). Invalid rules (none, a window given twice, more than 8) or TTL
/// change nothing and return [`OverrideError::Invalid`].
#[must_use = "an override is set only when awaited or run with `.blocking()`"]
#[derive(Clone, Debug)]
pub struct SetOverride<'l> {
    target: Target<'l>,
    rules: Vec<Rule>,
    ttl: Option<Duration>,
}

impl<'l> SetOverride<'l> {
    /// Ends the override after `ttl` (1ms to 366 days; whole milliseconds), on the store's
    /// clock (Redis ends the key itself). Without it, it lasts until cleared.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Overrides the limiter's limit of this type (by default its first rate limit counted
    /// per subject: per user, IP or key, else its first).
    pub fn limit_type(mut self, limit_type: LimitType) -> Self {
        self.target.limit_type = Some(limit_type);
        self
    }

    /// Sets it, blocking the thread.
    pub fn blocking(self) -> Result<(), OverrideError> {
        self.into_future().blocking()
    }

    fn answer(&self) -> Result<Answer<()>, BuildError> {
        let checked = checked_rules(self.rules.clone()).and_then(|rules| {
            let ttl_ms = self.ttl.map(checked_ttl).transpose()?.unwrap_or(0);
            Ok(Some((encode_rules(&rules), ttl_ms)))
        });
        self.target.write(checked)
    }
}

impl IntoFuture for SetOverride<'_> {
    type Output = Result<(), OverrideError>;
    type IntoFuture = OverrideFuture<()>;

    fn into_future(self) -> OverrideFuture<()> {
        OverrideFuture::of(self.answer(), Ok)
    }
}

/// Clears one subject's runtime override ([`Limiter::clear_override`]): `.await` it, or run it
/// with [`blocking`](Self::blocking).
#[must_use = "an override is cleared only when awaited or run with `.blocking()`"]
#[derive(Clone, Debug)]
pub struct ClearOverride<'l> {
    target: Target<'l>,
}

impl ClearOverride<'_> {
    /// Clears the override of the limiter's limit of this type (as [`SetOverride::limit_type`]).
    pub fn limit_type(mut self, limit_type: LimitType) -> Self {
        self.target.limit_type = Some(limit_type);
        self
    }

    /// Clears it, blocking the thread.
    pub fn blocking(self) -> Result<(), OverrideError> {
        self.into_future().blocking()
    }
}

impl IntoFuture for ClearOverride<'_> {
    type Output = Result<(), OverrideError>;
    type IntoFuture = OverrideFuture<()>;

    fn into_future(self) -> OverrideFuture<()> {
        OverrideFuture::of(self.target.write(Ok(None)), Ok)
    }
}

/// Lists a limiter's runtime overrides in force ([`Limiter::overrides`]): `.await` it, or run
/// it with [`blocking`](Self::blocking). One round trip on Redis (those that ended are dropped
/// from the limiter's index on the way).
#[must_use = "a listing reads nothing until it is awaited or run with `.blocking()`"]
#[derive(Clone, Copy, Debug)]
pub struct ListOverrides<'l> {
    limiter: &'l Limiter,
}

impl ListOverrides<'_> {
    /// Lists them, blocking the thread.
    pub fn blocking(self) -> Result<Vec<Override>, OverrideError> {
        self.into_future().blocking()
    }
}

impl IntoFuture for ListOverrides<'_> {
    type Output = Result<Vec<Override>, OverrideError>;
    type IntoFuture = OverrideFuture<Vec<Override>>;

    fn into_future(self) -> OverrideFuture<Vec<Override>> {
        let index = self.limiter.override_limit(None).map(|l| l.override_index.clone());
        let answer = index.map(|index| self.limiter.store().list_overrides(&index, INTERNAL));
        OverrideFuture::of(answer, |index: IndexEntries| {
            Ok(index.entries.iter().filter_map(|(field, value)| read_index(field, value, index.now_ms)).collect())
        })
    }
}

/// The store's answer to an override request, on its way.
type Answering<T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send>>;

/// An override request being awaited: refused before any store call, or the store's answer.
#[must_use = "futures do nothing unless awaited"]
pub struct OverrideFuture<T> {
    invalid: Option<BuildError>,
    answer: Option<Answering<T>>,
}

impl<T: Send + 'static> OverrideFuture<T> {
    fn of<R: Send + 'static>(
        answer: Result<Answer<R>, BuildError>,
        then: fn(R) -> Result<T, StoreError>,
    ) -> OverrideFuture<T> {
        match answer {
            Err(invalid) => OverrideFuture { invalid: Some(invalid), answer: None },
            Ok(Answer::Ready(r)) => {
                OverrideFuture { invalid: None, answer: Some(Box::pin(std::future::ready(r.and_then(then)))) }
            }
            Ok(Answer::Remote(fut)) => OverrideFuture {
                invalid: None,
                answer: Some(Box::pin(async move { io::Remote::new(fut).await.and_then(then) })),
            },
        }
    }

    fn blocking(self) -> Result<T, OverrideError> {
        match (self.invalid, self.answer) {
            (Some(invalid), _) => Err(OverrideError::Invalid(invalid)),
            (None, Some(answer)) => io::block_on(answer).map_err(OverrideError::Store),
            (None, None) => Err(OverrideError::Store(StoreError::other("polled again"))),
        }
    }
}

impl<T> Future for OverrideFuture<T> {
    type Output = Result<T, OverrideError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(invalid) = this.invalid.take() {
            return Poll::Ready(Err(OverrideError::Invalid(invalid)));
        }
        match &mut this.answer {
            Some(answer) => answer.as_mut().poll(cx).map_err(OverrideError::Store),
            None => Poll::Ready(Err(OverrideError::Store(StoreError::other("polled again")))),
        }
    }
}
