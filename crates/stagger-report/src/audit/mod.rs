//! What `stagger audit` shows: the audit of service configs as a table, a
//! call path as text and as an SVG picture, a repository's audit as text,
//! and every finding as SARIF.
//!
//! The audit (`stagger_audit`) measures; this module only draws what it
//! measured.
//!
//! ```
//! use stagger_audit::path::{audit_path, Options, PathInput};
//!
//! let vs = "kind: VirtualService\nspec:\n  hosts: [reviews]\n  http:\n  - retries: {attempts: 2}\n";
//! let report = audit_path(&[PathInput::new("vs.yaml", vs, None)], &Options::default()).unwrap();
//! let text = stagger_report::audit::path_text(&report);
//! assert!(text.starts_with("Call path, edge first (HTTP)"), "{text}");
//! assert!(stagger_report::audit::path_svg(&report).starts_with("<svg"));
//! ```

mod path;
mod picture;
mod repo;
pub mod sarif;
mod table;

pub use path::path_text;
pub use picture::path_svg;
pub use repo::repo_text;
pub use table::table;

#[cfg(test)]
mod tests;
