//! The bounded directory of deferred tools (tool-search.md §11).

use crate::catalog::{Catalog, SourceKind};
use crate::text::{collate, one_line, safe_cut_utf16, utf16_len};

/// Directory budget (UTF-16 code units).
pub const DIRECTORY_CHARS: usize = 18_000;
/// Directory header.
pub const DIRECTORY_HEADER: &str = "Available deferred-schema tools:";
/// Directory text when nothing is deferred.
pub const DIRECTORY_NONE: &str = "Available deferred-schema tools: none.";

/// Directory closing line when `n` rows were omitted.
pub fn directory_omitted_line(n: usize) -> String {
    format!("({n} more tools omitted from this list; they remain searchable with tool_search.)")
}

/// One directory row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryRow {
    /// Tool name.
    pub name: String,
    /// `sourceName` (e.g. `core` or a plugin id).
    pub source_name: String,
    /// Description (whitespace is collapsed to single spaces).
    pub description: String,
}

fn shorten(desc: &str, cap: usize) -> String {
    if utf16_len(desc) <= cap {
        desc.to_string()
    } else {
        format!("{}...", safe_cut_utf16(desc, cap.saturating_sub(3)))
    }
}

fn row_text(r: &DirectoryRow, cap: Option<usize>) -> String {
    let d = match cap {
        Some(c) => shorten(&r.description, c),
        None => r.description.clone(),
    };
    if d.is_empty() {
        format!("- {} ({})", r.name, r.source_name)
    } else {
        format!("- {} ({}): {}", r.name, r.source_name, d)
    }
}

/// Render the directory block (tool-search.md §11) within `budget` UTF-16
/// code units. Rows are sorted by name. When it does not fit, the largest
/// per-description cap that fits is chosen (a shortened description is
/// safe-cut so that it plus `...` is at most `cap` code units); only if rows
/// still do not fit with minimal descriptions (`...`) are rows omitted from
/// the end, followed by a closing line.
pub fn render_directory(rows: &[DirectoryRow], budget: usize) -> String {
    if rows.is_empty() {
        return DIRECTORY_NONE.to_string();
    }
    let mut rows: Vec<DirectoryRow> = rows
        .iter()
        .map(|r| DirectoryRow {
            name: r.name.clone(),
            source_name: r.source_name.clone(),
            description: one_line(&r.description),
        })
        .collect();
    rows.sort_by(|a, b| collate(&a.name, &b.name));
    let header = utf16_len(DIRECTORY_HEADER);
    let total = |cap: Option<usize>| -> usize {
        header
            + rows
                .iter()
                .map(|r| 1 + utf16_len(&row_text(r, cap)))
                .sum::<usize>()
    };
    let join = |cap: Option<usize>, n: usize| -> String {
        let mut s = DIRECTORY_HEADER.to_string();
        for r in &rows[..n] {
            s.push('\n');
            s.push_str(&row_text(r, cap));
        }
        s
    };
    if total(None) <= budget {
        return join(None, rows.len());
    }
    let max_len = rows
        .iter()
        .map(|r| utf16_len(&r.description))
        .max()
        .unwrap_or(0);
    const MIN_CAP: usize = 3;
    if total(Some(MIN_CAP)) <= budget {
        // total(cap) is non-decreasing in cap: binary search the largest fit.
        let (mut lo, mut hi) = (MIN_CAP, max_len);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if total(Some(mid)) <= budget {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        return join(Some(lo), rows.len());
    }
    // Omit rows from the end.
    let lens: Vec<usize> = rows
        .iter()
        .map(|r| 1 + utf16_len(&row_text(r, Some(MIN_CAP))))
        .collect();
    let mut keep = rows.len();
    let mut used: usize = header + lens.iter().sum::<usize>();
    loop {
        let omitted = rows.len() - keep;
        let closing = 1 + utf16_len(&directory_omitted_line(omitted));
        if omitted > 0 && used + closing <= budget || keep == 0 {
            let mut s = join(Some(MIN_CAP), keep);
            if omitted > 0 {
                s.push('\n');
                s.push_str(&directory_omitted_line(omitted));
            }
            return s;
        }
        keep -= 1;
        used -= lens[keep];
    }
}

impl Catalog {
    /// The bounded directory (tool-search.md §11): trusted deferred host
    /// tools only.
    pub fn directory(&self) -> String {
        let rows: Vec<DirectoryRow> = self
            .entries
            .iter()
            .filter(|e| e.kind() == SourceKind::Host && !e.spec().always_visible)
            .map(|e| DirectoryRow {
                name: e.name().to_string(),
                source_name: e.source().source_name(),
                description: e.description().to_string(),
            })
            .collect();
        render_directory(&rows, DIRECTORY_CHARS)
    }
}
