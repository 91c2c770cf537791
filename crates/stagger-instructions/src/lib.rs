//! Instruction counts of stagger's layers beside their peers: the bench
//! `benches/instructions.rs` counts, under callgrind, the instructions each
//! of stagger's tower layers and its peer (tower's `Retry` and `hedge`,
//! tower-acc's limiters, backon's retries) executes per call, in one run,
//! and `benches/instruction_ratios.py` prints their ratios.
//!
//! ```text
//! cargo install gungraun-runner --version 0.20.0 --locked   # once; valgrind from apt
//! GUNGRAUN_SAVE_SUMMARY=json cargo bench -p stagger-instructions --bench instructions
//! python3 crates/stagger-instructions/benches/instruction_ratios.py
//! ```
//!
//! The crate has no code of its own and is not published.
#![forbid(unsafe_code)]
