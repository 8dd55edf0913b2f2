//! A page of a batch's items (`GET /batches/{id}/items`): how far one page may
//! walk the batch, and where the next page starts.

use serde::Deserialize;

use crate::core::batch::requests::MAX_PAGE;
use crate::core::batch::rows::ItemRow;

/// The most rows one page walks, per walk (a batch's id ranges; its rows stored
/// before migration 0017), matching or not (`sql/list_batch_items.sql`'s ?5).
/// Without it a status few items have (a finished million-item batch's
/// `pending`) reads the whole batch in one statement: up to 2 M rows read per
/// click, near D1's 30 s per query. 10,000 rows is a few ms and a
/// predictable bill; at least `MAX_PAGE`, so a page of any status always fills.
pub const ITEMS_WALKED_PER_PAGE: i64 = 10_000;
const _: () = assert!(ITEMS_WALKED_PER_PAGE >= MAX_PAGE);

/// A row of `sql/list_batch_items.sql`: an item, whether it has the status asked
/// for, and whether it is the last row its walk read (`cut`).
#[derive(Debug, Clone, Deserialize)]
pub struct ListedRow {
    #[serde(flatten)]
    pub item: ItemRow,
    pub listed: i64,
    pub cut: i64,
}

/// One page: its items and where the next one starts (`None`: the listing ended).
#[derive(Debug, Clone, PartialEq)]
pub struct ItemsPage {
    pub items: Vec<ItemRow>,
    pub next_after: Option<String>,
}

impl ItemsPage {
    /// A page read in one go (no walk to bound, as the failed items' index): the
    /// next page starts after its last row when it is full.
    pub fn of(items: Vec<ItemRow>, limit: i64) -> ItemsPage {
        let next_after = (items.len() as i64 == limit)
            .then(|| items.last().map(|i| i.subject_id.clone()))
            .flatten();
        ItemsPage { items, next_after }
    }
}

/// The page `rows` (in subject order, at most `limit`) make. It ends at the first
/// row a walk stopped on: past it that walk read nothing, so a row of the other
/// walk beyond it would be listed again by the next page, and the next page
/// starts there, however few items matched (none, even). Otherwise the next page
/// starts after the last row of a full page.
pub fn items_page(rows: Vec<ListedRow>, limit: i64) -> ItemsPage {
    let full = rows.len() as i64 == limit;
    let mut items = Vec::new();
    let mut last = None;
    let mut cut = false;
    for row in rows {
        last = Some(row.item.subject_id.clone());
        cut = row.cut != 0;
        if row.listed != 0 {
            items.push(row.item);
        }
        if cut {
            break;
        }
    }
    ItemsPage {
        items,
        next_after: if cut || full { last } else { None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(subject: &str, listed: bool, cut: bool) -> ListedRow {
        ListedRow {
            item: ItemRow {
                id: 1,
                subject_id: subject.into(),
                kind: "noop".into(),
                status: "pending".into(),
                attempt: 0,
                max_attempts: 3,
                last_error: None,
                run_after: 0,
                started_at: None,
                completed_at: None,
                receipts: None,
                limits: None,
            },
            listed: i64::from(listed),
            cut: i64::from(cut),
        }
    }

    fn subjects(page: &ItemsPage) -> Vec<&str> {
        page.items.iter().map(|i| i.subject_id.as_str()).collect()
    }

    #[test]
    fn a_full_page_continues_after_its_last_item() {
        let page = items_page(vec![row("a", true, false), row("b", true, false)], 2);
        assert_eq!(subjects(&page), ["a", "b"]);
        assert_eq!(page.next_after.as_deref(), Some("b"));
    }

    #[test]
    fn a_short_page_with_no_walk_stopped_is_the_last() {
        let page = items_page(vec![row("a", true, false)], 2);
        assert_eq!(subjects(&page), ["a"]);
        assert_eq!(page.next_after, None);
        assert_eq!(items_page(Vec::new(), 2).next_after, None);
    }

    #[test]
    fn a_walk_that_stopped_on_a_row_of_another_status_continues_from_it_with_no_items() {
        let page = items_page(vec![row("m", false, true)], 20);
        assert!(page.items.is_empty());
        assert_eq!(page.next_after.as_deref(), Some("m"));
    }

    #[test]
    fn a_walk_that_stopped_on_a_matching_row_lists_it_and_continues_from_it() {
        let page = items_page(vec![row("a", true, false), row("m", true, true)], 20);
        assert_eq!(subjects(&page), ["a", "m"]);
        assert_eq!(page.next_after.as_deref(), Some("m"));
    }

    #[test]
    fn the_page_ends_at_the_first_stop_leaving_the_other_walks_rows_after_it() {
        // One walk stopped at "m"; the other's "x" comes after: the next page,
        // starting after "m", lists it.
        let rows = vec![
            row("a", true, false),
            row("m", false, true),
            row("x", true, false),
        ];
        let page = items_page(rows, 20);
        assert_eq!(subjects(&page), ["a"]);
        assert_eq!(page.next_after.as_deref(), Some("m"));
    }
}
