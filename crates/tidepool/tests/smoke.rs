use std::sync::Arc;
use tidepool::Pool;

#[test]
fn smoke() {
    let pool = Arc::new(
        Pool::builder(|| vec![0u8; 16])
            .batch_size(2)
            .max_idle(4)
            .build()
            .unwrap(),
    );
    let mut v = Vec::new();
    for _ in 0..10 {
        v.push(pool.get_owned().unwrap());
    }
    let s = pool.stats();
    assert_eq!((s.created, s.live, s.idle), (10, 10, 0));
    drop(v);
    let s = pool.stats();
    println!("{s:?}");
    assert_eq!(s.live, 0);
    assert!(s.idle <= 4 + 4);
    assert_eq!(s.existing(), s.idle);
    let g = pool.get_owned().unwrap();
    std::thread::spawn(move || drop(g)).join().unwrap();
    let s = pool.stats();
    println!("{s:?}");
    assert_eq!(s.live, 0);
    drop(pool);
}
