//! `stagger audit FILE` for a file the call-path readers read: every host,
//! route, policy or instance it holds, each audited as a path of one
//! layer.
//!
//! The file is parsed once; its reader lists the objects it holds (the
//! list its "name one" error gives), and each is read from the parsed
//! documents.

use super::detect::Parsed;
use super::{check, report, Options, PathError, PathInput, PathReport};

/// The most objects of one file audited one by one once a host's routes
/// (or a route's rules) are opened: a file whose second level would take
/// it past this is an error that says so.
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
/// `HOST/ROUTE`) is one report each, in file order. The first object that
/// does not read is the error.
///
/// ```
/// use stagger_audit::path::{audit_file, Options};
///
/// let vs = "\
/// apiVersion: networking.istio.io/v1
/// kind: VirtualService
/// metadata: {name: cart}
/// spec:
///   hosts: [cart]
///   http:
///   - name: read
///     route: [{destination: {host: cart}}]
///   - name: write
///     route: [{destination: {host: cart}}]
///     retries: {attempts: 0}
/// ";
/// let all = audit_file("cart-vs.yaml", vs, &Options::default()).unwrap();
/// let sels: Vec<_> = all.iter().map(|r| r.selector.as_deref()).collect();
/// assert_eq!(sels, [Some("cart/read"), Some("cart/write")]);
/// assert_eq!(all[1].report.dead.bottom_attempts, 1.0);
/// ```
pub fn audit_file(name: &str, text: &str, o: &Options) -> Result<Vec<FileReport>, PathError> {
    check(o)?;
    let parsed = Parsed::read(PathInput::new(name, text, None))?;
    objects(&parsed, o)
}

/// Every object of a file read once (options already checked), as
/// [`audit_file`] lists them.
pub(crate) fn objects(p: &Parsed<'_>, o: &Options) -> Result<Vec<FileReport>, PathError> {
    let one = |selector: Option<&str>| {
        report(&[p.at(selector)], o).map(|report| FileReport {
            selector: selector.map(str::to_string),
            report,
        })
    };
    let top = p.selectors(None);
    if top.is_empty() {
        return Ok(vec![one(None)?]);
    }
    let mut out = Vec::with_capacity(top.len());
    for (i, sel) in top.iter().enumerate() {
        let under = p.selectors(Some(sel));
        if under.is_empty() {
            out.push(one(Some(sel))?);
            continue;
        }
        let after = top.len() - i - 1;
        if out.len() + after >= MAX_CHOICES {
            return Err(too_many(p.name(), out.len(), sel, &under, after));
        }
        for s in &under {
            out.push(one(Some(s))?);
        }
    }
    Ok(out)
}

/// The error of a file whose objects go past [`MAX_CHOICES`]: what was
/// read, where it stopped and how to name one.
fn too_many(file: &str, read: usize, at: &str, under: &[String], after: usize) -> PathError {
    PathError::new(
        file,
        "",
        format!(
            "holds more than {MAX_CHOICES} objects, the most the audit reads of one file one by one ({read} read, then {} under {at:?} and {after} more after it): name one as {file}:{}",
            under.len(),
            under.first().map_or("SELECTOR", String::as_str),
        ),
    )
    .with_choices(under.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::tree::PARSED;

    #[test]
    fn a_file_of_many_objects_is_parsed_once() {
        let mut text = String::new();
        for h in ["a", "b", "c"] {
            text += &format!("---\nkind: VirtualService\nmetadata: {{name: {h}}}\nspec:\n  hosts: [{h}]\n  http:\n  - route: [{{destination: {{host: {h}}}}}]\n  - route: [{{destination: {{host: {h}}}}}]\n");
        }
        let before = PARSED.with(std::cell::Cell::get);
        let all = audit_file("vs.yaml", &text, &Options::default()).unwrap();
        assert_eq!(all.len(), 6);
        assert_eq!(PARSED.with(std::cell::Cell::get) - before, 1);
    }
}
