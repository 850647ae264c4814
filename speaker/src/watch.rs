//! Publishing on a `tokio::sync::watch` channel only when the value changed, so receivers wake
//! for a change and never for the same value again.

use tokio::sync::watch;

/// Replaces the watched value with `now` when it differs; returns whether it did (and so woke
/// the receivers).
pub fn send_if_changed<T: PartialEq>(tx: &watch::Sender<T>, now: T) -> bool {
    tx.send_if_modified(|v| {
        let changed = *v != now;
        if changed {
            *v = now;
        }
        changed
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_value_again_wakes_no_receiver_and_a_new_one_does() {
        let (tx, mut rx) = watch::channel(1);
        rx.mark_unchanged();
        assert!(!send_if_changed(&tx, 1));
        assert!(!rx.has_changed().unwrap());
        assert!(send_if_changed(&tx, 2));
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 2);
    }
}
