//! The quick index for the `exec` description (contract.md §8.2).

use crate::catalog::Catalog;
use crate::projection::Projection;
use crate::text::{utf16_len, CollationKey};

/// Quick index budget (UTF-16 code units, footer included).
pub const QUICK_INDEX_CHARS: usize = 8_000;
/// Quick index footer when every tool is listed.
pub const QUICK_INDEX_FOOTER: &str =
    "Call these globals directly; use catalog.search(query) when lookup is ambiguous.";

/// Quick index footer when `n` tools were skipped.
pub fn quick_index_omitted_footer(n: usize) -> String {
    format!("{n} additional tools omitted from this prompt index. Use catalog.search(query); results are callable.")
}

impl Catalog {
    /// The quick index for the `exec` description (contract.md §8.2).
    pub fn quick_index(&self, projection: &Projection) -> String {
        let mut lines: Vec<(bool, CollationKey, String)> = projection
            .bindings()
            .iter()
            .filter_map(|b| {
                let e = self.get(&b.id)?;
                let input = e.input_hint().unwrap_or("unknown");
                let output = e.output_hint();
                Some((
                    output.is_some(),
                    CollationKey::new(&b.callable_name),
                    format!(
                        "- {} {} -> {}",
                        b.callable_name,
                        input,
                        output.unwrap_or("?")
                    ),
                ))
            })
            .collect();
        lines.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let reserve =
            utf16_len(QUICK_INDEX_FOOTER).max(utf16_len(&quick_index_omitted_footer(lines.len())));
        let mut out = String::new();
        let mut used = 0usize;
        let mut skipped = 0usize;
        for (_, _, line) in &lines {
            let len = utf16_len(line) + 1;
            if used + len + reserve <= QUICK_INDEX_CHARS {
                out.push_str(line);
                out.push('\n');
                used += len;
            } else {
                skipped += 1;
            }
        }
        if skipped > 0 {
            out.push_str(&quick_index_omitted_footer(skipped));
        } else {
            out.push_str(QUICK_INDEX_FOOTER);
        }
        out
    }
}
