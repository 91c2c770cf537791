//! What an executor asks of the closures it is given: how an error is
//! classified, whether an `Ok` is still a failure, and who hears of a wait.
//! Each is a trait closures implement, with the default a call starts
//! with; a user passes closures and never names these.

use super::Notice;
use crate::classify::Classify;
use crate::outcome::Failure;

/// Decides the class of an error. Implemented for closures
/// `FnMut(&E) -> X` where `X` is a [`Class`] or a [`Failure`].
pub trait Classifier<E> {
    /// The failure this error represents.
    fn classify(&mut self, error: &E) -> Failure;
}

/// The default classifier: every error is transient (as backon and tower
/// do). Use [`ByClass`] (`.when_classified()`) for errors that implement
/// [`Classify`], such as `std::io::Error`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllTransient;

impl<E> Classifier<E> for AllTransient {
    #[inline]
    fn classify(&mut self, _: &E) -> Failure {
        Failure::transient()
    }
}

/// Classifies errors through their [`Classify`] implementation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByClass;

impl<E: Classify> Classifier<E> for ByClass {
    #[inline]
    fn classify(&mut self, error: &E) -> Failure {
        Failure::new(error.class())
    }
}

impl<E, F, X> Classifier<E> for F
where
    F: FnMut(&E) -> X,
    X: Into<Failure>,
{
    #[inline]
    fn classify(&mut self, error: &E) -> Failure {
        self(error).into()
    }
}

/// Decides whether a *successful* value should be treated as a failure (for
/// example a response that says "try again"). Implemented for closures
/// `FnMut(&T) -> Option<X>` with `X` a [`Class`] or a [`Failure`].
pub trait OkCheck<T> {
    /// `Some(failure)` to retry despite the value.
    fn check(&mut self, value: &T) -> Option<Failure>;
}

/// The default: every `Ok` is a success.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptAll;

impl<T> OkCheck<T> for AcceptAll {
    #[inline]
    fn check(&mut self, _: &T) -> Option<Failure> {
        None
    }
}

impl<T, F, X> OkCheck<T> for F
where
    F: FnMut(&T) -> Option<X>,
    X: Into<Failure>,
{
    #[inline]
    fn check(&mut self, value: &T) -> Option<Failure> {
        self(value).map(Into::into)
    }
}

/// A hook called before each wait.
pub trait Notify<T, E> {
    /// Called with what failed and how long the executor will wait.
    fn notify(&mut self, notice: &Notice<'_, T, E>);

    /// Whether the hook wants notices (lets the executor skip reading the
    /// clock for a hook that does nothing).
    fn wants(&self) -> bool {
        true
    }
}

/// The default: no hook.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl<T, E> Notify<T, E> for Silent {
    #[inline]
    fn notify(&mut self, _: &Notice<'_, T, E>) {}

    #[inline]
    fn wants(&self) -> bool {
        false
    }
}

impl<T, E, F: FnMut(&Notice<'_, T, E>)> Notify<T, E> for F {
    #[inline]
    fn notify(&mut self, notice: &Notice<'_, T, E>) {
        self(notice)
    }
}
