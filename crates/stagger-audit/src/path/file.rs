//! `stagger audit FILE` for a file the call-path readers read: every host,
//! route, policy or instance it holds, each audited as a path of one
//! layer.

use super::{audit_path, Options, PathError, PathInput, PathReport};

/// The most objects of one file audited one by one.
const MAX_CHOICES: usize = 500;

/// One object of a file and its audit.
#[derive(Debug, Clone, PartialEq)]
pub struct FileReport {
    /// The selector that names it (`None` when the file holds one).
    pub selector: Option<String>,
    /// Its audit as a path of one layer.
    pub report: PathReport,
}

/// Audits every object `text` holds: a file with one is one report; a file
/// with several hosts, routes or instances (two levels deep, as
/// `HOST/ROUTE`) is one report each, in file order.
pub fn audit_file(name: &str, text: &str, o: &Options) -> Result<Vec<FileReport>, PathError> {
    let mut out = Vec::new();
    let mut todo: Vec<Option<String>> = vec![None];
    while let Some(sel) = todo.pop() {
        let input = PathInput::new(name, text, sel.as_deref());
        match audit_path(&[input], o) {
            Ok(report) => out.push(FileReport {
                selector: sel,
                report,
            }),
            Err(e) if !e.choices.is_empty() && out.len() + todo.len() < MAX_CHOICES => {
                let deeper: Vec<Option<String>> = e
                    .choices
                    .iter()
                    .map(|c| {
                        Some(match &sel {
                            // A choice of a host's routes: HOST/ROUTE.
                            Some(s) if !c.starts_with(&format!("{s}/")) => format!("{s}/{c}"),
                            _ => c.clone(),
                        })
                    })
                    .collect();
                if sel.is_some() && e.choices.iter().any(|c| Some(c) == sel.as_ref())
                    || deeper.contains(&sel)
                {
                    return Err(e);
                }
                todo.extend(deeper.into_iter().rev());
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
