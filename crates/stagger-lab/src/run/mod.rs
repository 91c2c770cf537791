//! `stagger run`'s machinery: a supervisor that runs a command as a child
//! (signals forwarded, its process group stopped at a timeout, job-control
//! stops detected), the exit-code sets that decide what is retried, and
//! the lines and JSON report the command prints.

pub mod child;
pub mod codes;
pub mod drive;
pub mod report;
