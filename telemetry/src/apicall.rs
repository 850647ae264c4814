//! How both binaries treat a failed call to the API server: [`ApiCallError`] says why it
//! failed, typed, so that the retry policy, the metric label and the log or Event say the same
//! thing; [`backoff`] says how long a writer waits before it tries again.

use std::time::Duration;

/// The wait after the first failure in a row; each further failure doubles it.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait, however many failures came before.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How long a writer waits after its `failures`-th failed call in a row before it tries again:
/// [`FIRST_BACKOFF`] doubled per further failure, at most [`MAX_BACKOFF`]. `0` waits as long
/// as `1`.
pub fn backoff(failures: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1 << failures.saturating_sub(1).min(8))
        .min(MAX_BACKOFF)
}

/// A failed call to the API server.
#[derive(Debug, thiserror::Error)]
pub enum ApiCallError {
    /// The object changed since it was read (409): it is read again and planned again.
    #[error("the object changed since it was read; it is planned again from its new version")]
    Conflict,
    /// The object is gone (404).
    #[error("the object no longer exists")]
    NotFound,
    /// RBAC refused the call (403).
    #[error("forbidden: {0}; check the controller's ClusterRole")]
    Forbidden(String),
    /// The server refused the request as invalid (400, 422).
    #[error("refused as invalid: {0}")]
    Invalid(String),
    /// The server is overloaded or failing (429, 5xx).
    #[error("the API server answered {code}: {message}")]
    Unavailable {
        /// The HTTP status.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// Another answer the caller does not expect.
    #[error("the API server answered {code}: {message}")]
    Unexpected {
        /// The HTTP status.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// No answer: connection, TLS or timeout.
    #[error("the API server could not be reached: {0}")]
    Transport(String),
    /// This replica stopped leading before the call. The controller's own: it never comes from
    /// a [`kube::Error`], and the speaker, which has no leader, never meets it.
    #[error("this replica no longer leads")]
    NotLeader,
}

impl ApiCallError {
    /// The `reason` label of the failure counters (`ferrolb_api_errors_total` of the
    /// controller, `ferrolb_status_write_failures_total` of the speaker).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Conflict => "conflict",
            Self::NotFound => "not_found",
            Self::Forbidden(_) => "forbidden",
            Self::Invalid(_) => "invalid",
            Self::Unavailable { .. } => "unavailable",
            Self::Unexpected { .. } => "unexpected",
            Self::Transport(_) => "transport",
            Self::NotLeader => "not_leader",
        }
    }

    /// Whether it says nothing about the object's health: a conflict or a deleted object is
    /// resolved by reading again, not by backing off.
    pub fn is_benign(&self) -> bool {
        matches!(self, Self::Conflict | Self::NotFound | Self::NotLeader)
    }
}

impl From<kube::Error> for ApiCallError {
    fn from(e: kube::Error) -> Self {
        Self::from(&e)
    }
}

/// Classifies an error the caller still needs (to log it or to return it as it is).
impl From<&kube::Error> for ApiCallError {
    fn from(e: &kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => {
                let message = s.message.clone();
                match s.code {
                    409 => Self::Conflict,
                    404 => Self::NotFound,
                    403 => Self::Forbidden(message),
                    400 | 422 => Self::Invalid(message),
                    429 | 500..=599 => Self::Unavailable {
                        code: s.code,
                        message,
                    },
                    code => Self::Unexpected { code, message },
                }
            }
            other => Self::Transport(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("m", "r").with_code(code),
        ))
    }

    #[test]
    fn api_answers_map_to_the_error_kinds_their_codes_mean() {
        let labels: Vec<&str> = [409, 404, 403, 422, 429, 503, 418]
            .into_iter()
            .map(|c| ApiCallError::from(api(c)).metric_label())
            .collect();
        assert_eq!(
            labels,
            [
                "conflict",
                "not_found",
                "forbidden",
                "invalid",
                "unavailable",
                "unavailable",
                "unexpected"
            ]
        );
    }

    #[test]
    fn only_conflicts_missing_objects_and_lost_leadership_are_benign() {
        assert!(ApiCallError::from(api(409)).is_benign());
        assert!(ApiCallError::NotLeader.is_benign());
        assert!(!ApiCallError::from(api(500)).is_benign());
        assert!(!ApiCallError::from(api(403)).is_benign());
    }

    #[test]
    fn backoff_doubles_from_200_ms_to_at_most_30_s() {
        let waits: Vec<u64> = (1..=10).map(|n| backoff(n).as_millis() as u64).collect();
        assert_eq!(
            waits,
            [200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]
        );
    }
}
