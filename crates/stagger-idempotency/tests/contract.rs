//! The store contract, one suite every store passes: memory, a real Redis, a real PostgreSQL.

use bytes::Bytes;
use stagger_idempotency::{
    Claim, Completion, Fingerprint, MemoryStore, Store, StoredResponse, Token,
};
use std::sync::Arc;
use std::time::Duration;

fn fresh_key(what: &str) -> String {
    format!("{what}-{}", uuid::Uuid::new_v4())
}

fn answer() -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![
            (
                "content-type".into(),
                Bytes::from_static(b"application/json"),
            ),
            ("location".into(), Bytes::from_static(b"/orders/42")),
            ("etag".into(), Bytes::from_static(b"\"v1\"")),
        ],
        // Every byte value, so an encoding that is not binary-safe shows.
        body: Bytes::from(
            (0..=255u8)
                .chain(b"{\"id\":42}".iter().copied())
                .collect::<Vec<u8>>(),
        ),
    }
}

fn fp(body: &[u8]) -> Fingerprint {
    Fingerprint::of("POST", "/orders", body)
}

fn won(claim: Claim) -> Token {
    match claim {
        Claim::Won(token) => token,
        other => panic!("expected to win the claim, got {other:?}"),
    }
}

const LONG: Duration = Duration::from_secs(60);

/// N concurrent claims of one key: exactly one wins, every other sees it in flight.
pub async fn concurrent_claims_have_one_winner<St: Store>(store: St) {
    let key = Arc::new(fresh_key("race"));
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (store, key, barrier) = (store.clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .claim(&key, &fp(b"x"), LONG)
                    .await
                    .expect("the store answers")
            })
        })
        .collect();
    let mut winners = 0;
    for task in tasks {
        match task.await.expect("the task ends") {
            Claim::Won(_) => winners += 1,
            Claim::InFlight { expires_in, .. } => assert!(expires_in <= LONG),
            other => panic!("a racing claim saw {other:?}"),
        }
    }
    assert_eq!(winners, 1, "exactly one of 32 concurrent claims wins");
}

/// A claim's lease ends: the key can be taken over, and the first holder is fenced.
pub async fn a_lapsed_claim_is_taken_over_and_its_holder_fenced<St: Store>(store: St) {
    let key = fresh_key("lease");
    let first = won(store
        .claim(&key, &fp(b"x"), Duration::from_millis(300))
        .await
        .unwrap());
    assert!(matches!(
        store.claim(&key, &fp(b"x"), LONG).await.unwrap(),
        Claim::InFlight { .. }
    ));
    tokio::time::sleep(Duration::from_millis(450)).await;
    let second = won(store.claim(&key, &fp(b"x"), LONG).await.unwrap());
    assert_ne!(first, second, "a take-over gets a new fencing token");
    // The late finisher neither completes, renews nor releases the newer claim.
    let late = store
        .complete(&key, first, &fp(b"x"), &answer(), LONG)
        .await
        .unwrap();
    assert_eq!(late, Completion::Fenced);
    assert!(!store.renew(&key, first, LONG).await.unwrap());
    assert!(!store.release(&key, first).await.unwrap());
    assert!(matches!(
        store.claim(&key, &fp(b"x"), LONG).await.unwrap(),
        Claim::InFlight { .. }
    ));
    // The holder of the newer claim completes.
    let done = store
        .complete(&key, second, &fp(b"x"), &answer(), LONG)
        .await
        .unwrap();
    assert_eq!(done, Completion::Stored);
}

/// A renewed claim outlives its first lease.
pub async fn renewal_keeps_a_claim<St: Store>(store: St) {
    let key = fresh_key("renew");
    let token = won(store
        .claim(&key, &fp(b"x"), Duration::from_millis(300))
        .await
        .unwrap());
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(store
            .renew(&key, token, Duration::from_millis(300))
            .await
            .unwrap());
    }
    assert!(matches!(
        store.claim(&key, &fp(b"x"), LONG).await.unwrap(),
        Claim::InFlight { .. }
    ));
}

/// A completed answer is kept for its retention, then forgotten.
pub async fn answers_are_forgotten_after_the_retention<St: Store>(store: St) {
    let key = fresh_key("retention");
    let token = won(store.claim(&key, &fp(b"x"), LONG).await.unwrap());
    let stored = store
        .complete(
            &key,
            token,
            &fp(b"x"),
            &answer(),
            Duration::from_millis(300),
        )
        .await
        .unwrap();
    assert_eq!(stored, Completion::Stored);
    assert!(matches!(
        store.claim(&key, &fp(b"x"), LONG).await.unwrap(),
        Claim::Completed { .. }
    ));
    tokio::time::sleep(Duration::from_millis(450)).await;
    won(store.claim(&key, &fp(b"x"), LONG).await.unwrap());
}

/// The replayed answer is the stored one, byte for byte, with the first request's fingerprint.
pub async fn a_replay_is_the_stored_answer<St: Store>(store: St) {
    let key = fresh_key("replay");
    let token = won(store.claim(&key, &fp(b"first"), LONG).await.unwrap());
    store
        .complete(&key, token, &fp(b"first"), &answer(), LONG)
        .await
        .unwrap();
    match store.claim(&key, &fp(b"second"), LONG).await.unwrap() {
        Claim::Completed {
            fingerprint,
            response,
        } => {
            assert_eq!(fingerprint, fp(b"first"));
            assert_eq!(response, answer());
        }
        other => panic!("expected the stored answer, got {other:?}"),
    }
    // Completing twice with the same token changes nothing.
    let again = store
        .complete(&key, token, &fp(b"first"), &answer(), LONG)
        .await
        .unwrap();
    assert_eq!(again, Completion::Fenced);
}

/// A released claim lets the next request run; only the holder can release.
pub async fn a_released_claim_runs_again<St: Store>(store: St) {
    let key = fresh_key("release");
    let token = won(store.claim(&key, &fp(b"x"), LONG).await.unwrap());
    assert!(!store.release(&key, Token::new()).await.unwrap());
    assert!(store.release(&key, token).await.unwrap());
    won(store.claim(&key, &fp(b"x"), LONG).await.unwrap());
}

/// A finisher whose claim lapsed with nobody taking it over still stores its answer.
pub async fn a_late_finisher_with_no_newer_claim_stores<St: Store>(store: St) {
    let key = fresh_key("late");
    let token = won(store
        .claim(&key, &fp(b"x"), Duration::from_millis(200))
        .await
        .unwrap());
    tokio::time::sleep(Duration::from_millis(350)).await;
    let done = store
        .complete(&key, token, &fp(b"x"), &answer(), LONG)
        .await
        .unwrap();
    assert_eq!(done, Completion::Stored);
    assert!(matches!(
        store.claim(&key, &fp(b"x"), LONG).await.unwrap(),
        Claim::Completed { .. }
    ));
}

macro_rules! contract {
    ($store:ident, $make:expr) => {
        mod $store {
            #[allow(unused_imports)]
            use super::*;
            #[allow(unused_imports)]
            use crate::support::servers;

            contract!(@each $make;
                concurrent_claims_have_one_winner,
                a_lapsed_claim_is_taken_over_and_its_holder_fenced,
                renewal_keeps_a_claim,
                answers_are_forgotten_after_the_retention,
                a_replay_is_the_stored_answer,
                a_released_claim_runs_again,
                a_late_finisher_with_no_newer_claim_stores);
        }
    };
    (@each $make:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let make = $make;
                let Some(store) = make().await else { return };
                super::$name(store).await;
            }
        )*
    };
}

contract!(memory, || async { Some(MemoryStore::default()) });

#[cfg(feature = "redis")]
contract!(redis, || async {
    let url = servers::redis_url()?;
    Some(
        stagger_idempotency::RedisStore::connect(&url)
            .await
            .expect("the test's Redis answers"),
    )
});

#[cfg(feature = "postgres")]
contract!(postgres, || async {
    let url = servers::postgres_url()?;
    Some(
        stagger_idempotency::PostgresStore::connect(&url)
            .await
            .expect("the test's PostgreSQL answers"),
    )
});

/// Without the fleet features the suite cannot check the fleet stores: say so instead of passing
/// quietly.
#[test]
fn the_fleet_stores_are_in_this_build() {
    let redis = cfg!(feature = "redis");
    let postgres = cfg!(feature = "postgres");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        assert!(
            redis && postgres,
            "CI runs the contract with --all-features"
        );
    } else if !(redis && postgres) {
        eprintln!("the Redis and PostgreSQL contract runs with --features redis,postgres");
    }
}
