//! Structural check of an LMDB 0.9 data file (`data.mdb`, 64-bit, host byte order).
//!
//! LMDB pages carry no checksums and LMDB trusts every page it reads: a damaged
//! page header or node makes the reading process crash (out-of-bounds access,
//! or an `IS_LEAF` assertion abort). This module walks the B+trees of one
//! snapshot without trusting anything: the free-page tree, the main tree and
//! every named database found in it. Every read is bounds-checked, so any input
//! gives a [`Report`] or a [`CheckError`], never a panic.
//!
//! Checked for every reachable page: its number is within the snapshot's last
//! page and the file; the header names the page itself and exactly the expected
//! kind (branch above the leaf level, leaf at it, overflow for big values);
//! the free-space bounds and every node fit inside the page; children and
//! overflow runs stay in range; all leaves sit at the recorded depth; no page
//! is reached twice; keys increase within a page and stay inside the range
//! their parent gives them; the recorded entry and page counts match.
//! Duplicate-sorted data is refused: hippograph never creates it.

use std::cmp::Ordering;
use std::fmt;

/// Size of a page header (`MDB_page` up to `mp_ptrs`).
pub const PAGE_HEADER: usize = 16;
const NODE_HEADER: usize = 8;
const MAGIC: u32 = 0xBEEF_C0DE;
const DATA_VERSION: u32 = 1;
/// `MDB_db`: pad u32, flags u16, depth u16, then five u64.
const DB_SIZE: usize = 48;
/// `MDB_meta`: magic, version, address, mapsize, two `MDB_db`, last page, txnid.
const META_SIZE: usize = 4 + 4 + 8 + 8 + 2 * DB_SIZE + 8 + 8;
const P_BRANCH: u16 = 0x01;
const P_LEAF: u16 = 0x02;
const P_OVERFLOW: u16 = 0x04;
const P_META: u16 = 0x08;
const F_BIGDATA: u16 = 0x01;
const F_SUBDATA: u16 = 0x02;
const F_DUPDATA: u16 = 0x04;
const MDB_REVERSEKEY: u16 = 0x02;
const MDB_DUPSORT: u16 = 0x04;
const MDB_INTEGERKEY: u16 = 0x08;
const MDB_DUPFIXED: u16 = 0x10;
const MDB_INTEGERDUP: u16 = 0x20;
const MDB_REVERSEDUP: u16 = 0x40;
const P_INVALID: u64 = u64::MAX;
/// LMDB's cursor stack holds 32 levels; a deeper tree is unreadable.
const MAX_DEPTH: u16 = 32;
const MIN_PAGE_SIZE: usize = 256;
const MAX_PAGE_SIZE: usize = 65536;

/// Which meta page (snapshot) to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meta {
    /// The one LMDB opens with: the higher transaction id (page 0 on a tie).
    Newest,
    /// Page 0 or 1.
    Page(u8),
    /// The one holding this transaction id (a reader's snapshot).
    Txnid(u64),
}

/// Why no report was produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckError {
    /// Neither meta page holds the requested transaction, or damage was found
    /// after the chosen meta page changed under the check (it may have been
    /// read half-written): a writer committed meanwhile. Check a newer snapshot.
    Stale,
    /// The file is damaged: what is wrong and where.
    Corrupt(String),
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::Stale => f.write_str("the snapshot's meta page was rewritten before it could be checked"),
            CheckError::Corrupt(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for CheckError {}

/// What a successful check walked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The meta page checked (0 or 1) and its transaction id.
    pub meta_page: u8,
    pub txnid: u64,
    pub page_size: usize,
    /// The snapshot's last used page.
    pub last_page: u64,
    /// Branch, leaf and overflow pages reached from the snapshot.
    pub pages: u64,
    /// Every named database with its number of entries, in key order.
    pub databases: Vec<(Vec<u8>, u64)>,
}

fn corrupt<T>(what: String) -> Result<T, CheckError> {
    Err(CheckError::Corrupt(what))
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_ne_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_ne_bytes(s.try_into().ok()?))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off.checked_add(8)?)?;
    Some(u64::from_ne_bytes(s.try_into().ok()?))
}

/// One `MDB_db` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Db {
    pad: u32,
    flags: u16,
    depth: u16,
    branch_pages: u64,
    leaf_pages: u64,
    overflow_pages: u64,
    entries: u64,
    root: u64,
}

impl Db {
    fn parse(b: &[u8]) -> Option<Db> {
        Some(Db {
            pad: u32_at(b, 0)?,
            flags: u16_at(b, 4)?,
            depth: u16_at(b, 6)?,
            branch_pages: u64_at(b, 8)?,
            leaf_pages: u64_at(b, 16)?,
            overflow_pages: u64_at(b, 24)?,
            entries: u64_at(b, 32)?,
            root: u64_at(b, 40)?,
        })
    }
}

/// One `MDB_meta` (the bytes after a meta page's header).
#[derive(Debug, Clone, Copy)]
struct MetaRec {
    magic: u32,
    version: u32,
    free: Db,
    main: Db,
    last_page: u64,
    txnid: u64,
}

impl MetaRec {
    fn parse(b: &[u8]) -> Option<MetaRec> {
        Some(MetaRec {
            magic: u32_at(b, 0)?,
            version: u32_at(b, 4)?,
            free: Db::parse(b.get(24..24 + DB_SIZE)?)?,
            main: Db::parse(b.get(24 + DB_SIZE..24 + 2 * DB_SIZE)?)?,
            last_page: u64_at(b, 24 + 2 * DB_SIZE)?,
            txnid: u64_at(b, 32 + 2 * DB_SIZE)?,
        })
    }
}

/// How keys of a tree are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// Default comparator: bytewise, shorter first on a common prefix.
    Bytes,
    /// The free-page tree: 8-byte native unsigned integers.
    Integer,
    /// A comparator this check does not reproduce (reverse or integer keys of
    /// a foreign database): order is not checked.
    Unchecked,
}

impl Order {
    fn cmp(self, a: &[u8], b: &[u8]) -> Option<Ordering> {
        match self {
            Order::Bytes => Some(a.cmp(b)),
            Order::Integer => Some(u64_at(a, 0)?.cmp(&u64_at(b, 0)?)),
            Order::Unchecked => None,
        }
    }
}

/// What walking one tree found, compared with its `MDB_db` at the end.
#[derive(Default)]
struct Counts {
    branch: u64,
    leaf: u64,
    overflow: u64,
    entries: u64,
}

struct Tree<'a> {
    label: String,
    db: Db,
    order: Order,
    /// Only the main tree holds named databases.
    main: bool,
    /// Only the free-page tree holds page lists.
    free: bool,
    counts: Counts,
    subdbs: Vec<(&'a [u8], Db)>,
}

/// Who points at a page, for messages (formatted only on failure).
#[derive(Clone, Copy)]
enum Referrer {
    Root,
    /// A branch page at this level (root: 1).
    Branch(u16),
    /// Node `index` of leaf page `page` (a big value).
    Node {
        page: u64,
        index: usize,
    },
}

impl fmt::Display for Referrer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Referrer::Root => f.write_str("the root"),
            Referrer::Branch(level) => write!(f, "a level-{level} branch"),
            Referrer::Node { page, index } => write!(f, "node {index} of page {page}"),
        }
    }
}

struct Walker<'a> {
    data: &'a [u8],
    psize: usize,
    last_page: u64,
    seen: Vec<u64>,
    pages: u64,
}

fn name_label(name: &[u8]) -> String {
    let text = String::from_utf8_lossy(name);
    let short: String = text.chars().take(40).collect();
    if short.len() < text.len() {
        format!("database {short:?}…")
    } else {
        format!("database {short:?}")
    }
}

impl<'a> Walker<'a> {
    /// The bytes of page `pgno`, marking it seen; `what` says who points at it.
    fn page(&mut self, pgno: u64, tree: &str, what: Referrer) -> Result<&'a [u8], CheckError> {
        if pgno < 2 || pgno > self.last_page {
            return corrupt(format!("{tree}: {what} points at page {pgno}, outside pages 2..={}", self.last_page));
        }
        let (word, bit) = ((pgno / 64) as usize, pgno % 64);
        let slot = match self.seen.get_mut(word) {
            Some(slot) => slot,
            None => return corrupt(format!("{tree}: page {pgno} is beyond the file")),
        };
        if *slot & (1 << bit) != 0 {
            return corrupt(format!("{tree}: page {pgno} is reached twice ({what})"));
        }
        *slot |= 1 << bit;
        self.pages += 1;
        let start = (pgno as usize).checked_mul(self.psize);
        match start.and_then(|s| self.data.get(s..s.checked_add(self.psize)?)) {
            Some(page) => Ok(page),
            None => corrupt(format!("{tree}: page {pgno} is beyond the end of the file")),
        }
    }

    fn walk(&mut self, tree: &mut Tree<'a>) -> Result<(), CheckError> {
        let db = tree.db;
        let label = tree.label.clone();
        if db.flags & (MDB_DUPSORT | MDB_DUPFIXED | MDB_INTEGERDUP | MDB_REVERSEDUP) != 0 {
            return corrupt(format!(
                "{label}: flags {:#x} ask for sorted duplicates, which hippograph never creates",
                db.flags
            ));
        }
        if db.root == P_INVALID {
            if db.depth != 0 || db.branch_pages != 0 || db.leaf_pages != 0 || db.overflow_pages != 0 || db.entries != 0
            {
                return corrupt(format!("{label}: empty tree with depth {} and {} entries", db.depth, db.entries));
            }
            return Ok(());
        }
        if db.depth == 0 || db.depth > MAX_DEPTH {
            return corrupt(format!("{label}: depth {} (root page {})", db.depth, db.root));
        }
        self.visit(tree, &label, db.root, 1, None, None)?;
        let c = &tree.counts;
        let recorded = (db.branch_pages, db.leaf_pages, db.overflow_pages, db.entries);
        let found = (c.branch, c.leaf, c.overflow, c.entries);
        if recorded != found {
            return corrupt(format!(
                "{label}: records {} branch, {} leaf, {} overflow pages and {} entries, but the tree \
                 holds {}, {}, {} and {}",
                recorded.0, recorded.1, recorded.2, recorded.3, found.0, found.1, found.2, found.3
            ));
        }
        Ok(())
    }

    /// Checks the page `pgno` at `level` (root: 1) whose keys must lie in `[lower, upper)`.
    fn visit(
        &mut self,
        tree: &mut Tree<'a>,
        label: &str,
        pgno: u64,
        level: u16,
        lower: Option<&'a [u8]>,
        upper: Option<&'a [u8]>,
    ) -> Result<(), CheckError> {
        let depth = tree.db.depth;
        let what = if level == 1 { Referrer::Root } else { Referrer::Branch(level - 1) };
        let page = self.page(pgno, label, what)?;
        let psize = self.psize;
        let at = |msg: String| CheckError::Corrupt(format!("{label}: page {pgno}: {msg}"));
        let header_pgno = u64_at(page, 0).unwrap_or(P_INVALID);
        if header_pgno != pgno {
            return Err(at(format!("its header names page {header_pgno}")));
        }
        let flags = u16_at(page, 10).unwrap_or(0);
        let leaf = level == depth;
        let (want, kind) = if leaf { (P_LEAF, "leaf") } else { (P_BRANCH, "branch") };
        if flags != want {
            return Err(at(format!("flags {flags:#06x} where a {kind} page belongs (level {level} of {depth})")));
        }
        let lower_bound = usize::from(u16_at(page, 12).unwrap_or(0));
        let upper_bound = usize::from(u16_at(page, 14).unwrap_or(0));
        if lower_bound < PAGE_HEADER
            || lower_bound > upper_bound
            || upper_bound > psize
            || lower_bound % 2 != 0
            || upper_bound % 2 != 0
        {
            return Err(at(format!("free space bounds {lower_bound}..{upper_bound} (page size {psize})")));
        }
        let nkeys = (lower_bound - PAGE_HEADER) / 2;
        if nkeys == 0 && (!leaf || level > 1) {
            return Err(at(format!("an empty {kind} page below the root")));
        }
        if leaf {
            tree.counts.leaf += 1;
        } else {
            tree.counts.branch += 1;
        }
        let mut previous: Option<&'a [u8]> = None;
        let mut children: Vec<(u64, Option<&'a [u8]>)> = Vec::new();
        for i in 0..nkeys {
            let ptr = usize::from(u16_at(page, PAGE_HEADER + 2 * i).unwrap_or(0));
            if ptr < upper_bound || ptr % 2 != 0 || ptr + NODE_HEADER > psize {
                return Err(at(format!("node {i} at offset {ptr}, outside {upper_bound}..{psize}")));
            }
            let (lo, hi) = (u16_at(page, ptr).unwrap_or(0), u16_at(page, ptr + 2).unwrap_or(0));
            let nflags = u16_at(page, ptr + 4).unwrap_or(0);
            let ksize = usize::from(u16_at(page, ptr + 6).unwrap_or(0));
            let key_end = ptr + NODE_HEADER + ksize;
            let key = match page.get(ptr + NODE_HEADER..key_end) {
                Some(key) => key,
                None => return Err(at(format!("node {i}: a {ksize}-byte key overruns the page"))),
            };
            // A branch page's first key is never compared (it stands for "everything below").
            let ordered = leaf || i > 0;
            if ordered {
                if tree.order == Order::Integer && ksize != 8 {
                    return Err(at(format!("node {i}: a {ksize}-byte key where an 8-byte integer belongs")));
                }
                if let Some(prev) = previous {
                    if tree.order.cmp(prev, key).is_some_and(|o| o != Ordering::Less) {
                        return Err(at(format!("node {i}: key is not greater than the key before it")));
                    }
                }
                if let Some(low) = lower {
                    if tree.order.cmp(low, key) == Some(Ordering::Greater) {
                        return Err(at(format!("node {i}: key sorts before the parent's separator")));
                    }
                }
                if let Some(high) = upper {
                    // Leaf keys lie below the next separator; a separator may equal it.
                    let order = tree.order.cmp(key, high);
                    if if leaf { order.is_some_and(|o| o != Ordering::Less) } else { order == Some(Ordering::Greater) }
                    {
                        return Err(at(format!("node {i}: key sorts at or after the next separator")));
                    }
                }
                previous = Some(key);
            }
            if !leaf {
                let child = u64::from(lo) | (u64::from(hi) << 16) | (u64::from(nflags) << 32);
                children.push((child, if i == 0 { lower } else { Some(key) }));
                continue;
            }
            let dsize = (usize::from(lo)) | (usize::from(hi) << 16);
            if nflags & !(F_BIGDATA | F_SUBDATA | F_DUPDATA) != 0 {
                return Err(at(format!("node {i}: unknown node flags {nflags:#x}")));
            }
            if nflags & F_DUPDATA != 0 {
                return Err(at(format!("node {i}: duplicate-sorted data, which hippograph never writes")));
            }
            let in_page = if nflags & F_BIGDATA != 0 { 8 } else { dsize };
            let value = match page.get(key_end..key_end + in_page) {
                Some(value) => value,
                None => return Err(at(format!("node {i}: a {dsize}-byte value overruns the page"))),
            };
            tree.counts.entries += 1;
            if nflags & F_SUBDATA != 0 {
                if !tree.main || nflags & F_BIGDATA != 0 || dsize != DB_SIZE {
                    return Err(at(format!("node {i}: a named-database record that cannot be one")));
                }
                if let Some(db) = Db::parse(value) {
                    tree.subdbs.push((key, db));
                }
                continue;
            }
            let value = if nflags & F_BIGDATA != 0 {
                let first = u64_at(value, 0).unwrap_or(P_INVALID);
                let (big, run) = self.overflow(label, pgno, i, first, dsize)?;
                tree.counts.overflow += run;
                big
            } else {
                value
            };
            if tree.free {
                self.free_list(label, pgno, i, value)?;
            }
        }
        for (idx, (child, low)) in children.iter().enumerate() {
            let high = children.get(idx + 1).map_or(upper, |next| next.1);
            self.visit(tree, label, *child, level + 1, *low, high)?;
        }
        Ok(())
    }

    /// The value of node `i` of page `pgno` held in the overflow run starting at `first`, and the run's length.
    fn overflow(
        &mut self,
        label: &str,
        pgno: u64,
        i: usize,
        first: u64,
        dsize: usize,
    ) -> Result<(&'a [u8], u64), CheckError> {
        let what = Referrer::Node { page: pgno, index: i };
        let page = self.page(first, label, what)?;
        let at = |msg: String| CheckError::Corrupt(format!("{label}: overflow page {first} ({what}): {msg}"));
        let header_pgno = u64_at(page, 0).unwrap_or(P_INVALID);
        if header_pgno != first {
            return Err(at(format!("its header names page {header_pgno}")));
        }
        let flags = u16_at(page, 10).unwrap_or(0);
        if flags != P_OVERFLOW {
            return Err(at(format!("flags {flags:#06x} where an overflow page belongs")));
        }
        let count = u64::from(u32_at(page, 12).unwrap_or(0));
        let needed = ((PAGE_HEADER - 1 + dsize) / self.psize + 1) as u64;
        if count < needed || first.saturating_add(count - 1) > self.last_page {
            return Err(at(format!(
                "a run of {count} pages; the {dsize}-byte value needs {needed} within page {}",
                self.last_page
            )));
        }
        for extra in first + 1..first + count {
            self.page(extra, label, what)?;
        }
        let start = first as usize * self.psize + PAGE_HEADER;
        match self.data.get(start..start + dsize) {
            Some(value) => Ok((value, count)),
            None => Err(at("the value runs past the end of the file".to_string())),
        }
    }

    /// A free-page record: a count, then that many page numbers, all in range.
    fn free_list(&self, label: &str, pgno: u64, i: usize, value: &[u8]) -> Result<(), CheckError> {
        let slots = value.len() / 8;
        let count = u64_at(value, 0).unwrap_or(u64::MAX);
        if !value.len().is_multiple_of(8) || slots == 0 || count >= slots as u64 {
            return corrupt(format!(
                "{label}: page {pgno}: node {i}: a free-page list of {} bytes claims {count} pages",
                value.len()
            ));
        }
        for k in 1..=count as usize {
            let free = u64_at(value, 8 * k).unwrap_or(0);
            if free < 2 || free > self.last_page {
                return corrupt(format!("{label}: page {pgno}: node {i}: lists free page {free}, out of range"));
            }
        }
        Ok(())
    }
}

fn meta_at(data: &[u8], offset: usize) -> Option<MetaRec> {
    MetaRec::parse(data.get(offset.checked_add(PAGE_HEADER)?..offset.checked_add(PAGE_HEADER + META_SIZE)?)?)
}

/// The page size a meta record names, if LMDB could have written it.
fn page_size(meta: &MetaRec) -> Option<usize> {
    let psize = meta.free.pad as usize;
    (psize.is_power_of_two() && (MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&psize)).then_some(psize)
}

/// Checks the snapshot `which` of the LMDB data file `data`; see the module docs.
///
/// `data` may be a live mapping other processes write to. LMDB never rewrites
/// a page of a snapshot a reader holds (nor of any newer one), only the meta
/// pages: the chosen meta page is copied first and the walk uses the copy. A
/// copy taken while a writer rewrote the page may mix two commits; pages it
/// reaches are still a clean walk or damage, so damage found after the page
/// changed gives [`CheckError::Stale`] rather than a false report.
pub fn check(data: &[u8], which: Meta) -> Result<Report, CheckError> {
    let Some(meta0) = meta_at(data, 0) else {
        return corrupt(format!("the file is {} bytes, too short for a meta page", data.len()));
    };
    if meta0.magic != MAGIC || meta0.version != DATA_VERSION {
        return corrupt(format!(
            "page 0: not an LMDB 0.9 meta page (magic {:#x}, version {})",
            meta0.magic, meta0.version
        ));
    }
    let Some(psize) = page_size(&meta0) else {
        return corrupt(format!("page 0: page size {}", meta0.free.pad));
    };
    let Some(meta1) = meta_at(data, psize) else {
        return corrupt(format!("the file is {} bytes, too short for the second meta page", data.len()));
    };
    let chosen: u8 = match which {
        Meta::Newest => u8::from(meta0.txnid < meta1.txnid),
        Meta::Page(p) if p < 2 => p,
        Meta::Page(p) => return corrupt(format!("there is no meta page {p}")),
        Meta::Txnid(id) => {
            let preferred = (id & 1) as u8;
            let [a, b] = [meta0.txnid, meta1.txnid];
            match (preferred, a == id, b == id) {
                (0, true, _) | (1, true, false) => 0,
                (1, _, true) | (0, false, true) => 1,
                _ => return Err(CheckError::Stale),
            }
        }
    };
    let offset = usize::from(chosen) * psize;
    let before = data.get(offset..offset + PAGE_HEADER + META_SIZE).map(<[u8]>::to_vec).unwrap_or_default();
    let result = check_meta(data, chosen, psize, &before);
    let after = data.get(offset..offset + PAGE_HEADER + META_SIZE).unwrap_or_default();
    match result {
        Err(CheckError::Corrupt(_)) if after != before.as_slice() => Err(CheckError::Stale),
        other => other,
    }
}

fn check_meta(data: &[u8], chosen: u8, psize: usize, bytes: &[u8]) -> Result<Report, CheckError> {
    let (Some(pgno), Some(flags), Some(meta)) =
        (u64_at(bytes, 0), u16_at(bytes, 10), bytes.get(PAGE_HEADER..).and_then(MetaRec::parse))
    else {
        return corrupt(format!("meta page {chosen} is cut short"));
    };
    let here = format!("meta page {chosen}");
    if meta.magic != MAGIC || meta.version != DATA_VERSION {
        return corrupt(format!(
            "{here}: not an LMDB 0.9 meta page (magic {:#x}, version {})",
            meta.magic, meta.version
        ));
    }
    if pgno != u64::from(chosen) || flags & P_META == 0 {
        return corrupt(format!("{here}: header names page {pgno} with flags {flags:#06x}"));
    }
    if page_size(&meta) != Some(psize) {
        return corrupt(format!("{here}: page size {} differs from meta page 0's {psize}", meta.free.pad));
    }
    let file_pages = (data.len() / psize) as u64;
    if meta.last_page < 1 || meta.last_page >= file_pages {
        return corrupt(format!(
            "{here}: the last page is {}, but the file holds {file_pages} pages (truncated?)",
            meta.last_page
        ));
    }
    let mut walker =
        Walker { data, psize, last_page: meta.last_page, seen: vec![0; (meta.last_page / 64 + 1) as usize], pages: 0 };
    let mut trees = vec![
        Tree {
            label: "free-page tree".to_string(),
            // Its flags are the environment's; only its comparator matters here.
            db: Db { flags: 0, ..meta.free },
            order: Order::Integer,
            main: false,
            free: true,
            counts: Counts::default(),
            subdbs: Vec::new(),
        },
        Tree {
            label: "main tree".to_string(),
            db: meta.main,
            order: order_of(meta.main.flags),
            main: true,
            free: false,
            counts: Counts::default(),
            subdbs: Vec::new(),
        },
    ];
    let mut databases = Vec::new();
    for tree in &mut trees {
        walker.walk(tree)?;
    }
    let subdbs = std::mem::take(&mut trees[1].subdbs);
    for (name, db) in subdbs {
        let mut tree = Tree {
            label: name_label(name),
            db,
            order: order_of(db.flags),
            main: false,
            free: false,
            counts: Counts::default(),
            subdbs: Vec::new(),
        };
        walker.walk(&mut tree)?;
        databases.push((name.to_vec(), db.entries));
    }
    Ok(Report {
        meta_page: chosen,
        txnid: meta.txnid,
        page_size: psize,
        last_page: meta.last_page,
        pages: walker.pages,
        databases,
    })
}

fn order_of(flags: u16) -> Order {
    if flags & (MDB_REVERSEKEY | MDB_INTEGERKEY) != 0 {
        Order::Unchecked
    } else {
        Order::Bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PS: usize = 512;

    /// Node contents for the hand-built files.
    enum Val<'v> {
        Inline(&'v [u8]),
        Big(u64, usize),
        Sub(Db),
    }

    struct File {
        bytes: Vec<u8>,
    }

    /// A raw node: key, the size-or-child word, node flags, and the bytes after the key.
    type RawNode<'n> = (&'n [u8], u64, u16, Option<&'n [u8]>);

    impl File {
        fn new(pages: usize) -> File {
            File { bytes: vec![0; pages * PS] }
        }

        fn page(&mut self, pgno: u64) -> &mut [u8] {
            let s = pgno as usize * PS;
            &mut self.bytes[s..s + PS]
        }

        fn header(&mut self, pgno: u64, flags: u16) {
            let p = self.page(pgno);
            p[0..8].copy_from_slice(&pgno.to_ne_bytes());
            p[10..12].copy_from_slice(&flags.to_ne_bytes());
        }

        fn put16(&mut self, pgno: u64, off: usize, v: u16) {
            self.page(pgno)[off..off + 2].copy_from_slice(&v.to_ne_bytes());
        }

        /// A branch or leaf page whose nodes are packed from the end.
        fn nodes(&mut self, pgno: u64, flags: u16, nodes: &[RawNode<'_>]) {
            self.header(pgno, flags);
            let mut upper = PS;
            for (i, (key, lohi, nflags, data)) in nodes.iter().enumerate() {
                let body = data.map_or(0, <[u8]>::len);
                let size = (NODE_HEADER + key.len() + body + 1) & !1;
                upper -= size;
                let p = self.page(pgno);
                p[upper..upper + 2].copy_from_slice(&((*lohi & 0xffff) as u16).to_ne_bytes());
                p[upper + 2..upper + 4].copy_from_slice(&(((*lohi >> 16) & 0xffff) as u16).to_ne_bytes());
                p[upper + 4..upper + 6].copy_from_slice(&nflags.to_ne_bytes());
                p[upper + 6..upper + 8].copy_from_slice(&(key.len() as u16).to_ne_bytes());
                p[upper + 8..upper + 8 + key.len()].copy_from_slice(key);
                if let Some(data) = data {
                    p[upper + 8 + key.len()..upper + 8 + key.len() + data.len()].copy_from_slice(data);
                }
                self.put16(pgno, PAGE_HEADER + 2 * i, upper as u16);
            }
            self.put16(pgno, 12, (PAGE_HEADER + 2 * nodes.len()) as u16);
            self.put16(pgno, 14, upper as u16);
        }

        fn leaf(&mut self, pgno: u64, entries: &[(&[u8], Val<'_>)]) {
            let mut rendered: Vec<(Vec<u8>, u64, u16, Vec<u8>)> = Vec::new();
            for (key, val) in entries {
                rendered.push(match val {
                    Val::Inline(d) => (key.to_vec(), d.len() as u64, 0, d.to_vec()),
                    Val::Big(first, size) => (key.to_vec(), *size as u64, F_BIGDATA, first.to_ne_bytes().to_vec()),
                    Val::Sub(db) => (key.to_vec(), DB_SIZE as u64, F_SUBDATA, db_bytes(db)),
                });
            }
            let nodes: Vec<_> =
                rendered.iter().map(|(k, s, f, d)| (k.as_slice(), *s, *f, Some(d.as_slice()))).collect();
            self.nodes(pgno, P_LEAF, &nodes);
        }

        fn branch(&mut self, pgno: u64, children: &[(&[u8], u64)]) {
            let nodes: Vec<_> = children.iter().map(|(k, c)| (*k, *c & 0xffff_ffff, (*c >> 32) as u16, None)).collect();
            self.nodes(pgno, P_BRANCH, &nodes);
        }

        fn overflow(&mut self, pgno: u64, count: u32, data: &[u8]) {
            self.header(pgno, P_OVERFLOW);
            self.page(pgno)[12..16].copy_from_slice(&count.to_ne_bytes());
            let s = pgno as usize * PS + PAGE_HEADER;
            self.bytes[s..s + data.len()].copy_from_slice(data);
        }

        fn meta(&mut self, which: u64, free: Db, main: Db, last_page: u64, txnid: u64) {
            self.header(which, P_META);
            let m = which as usize * PS + PAGE_HEADER;
            let b = &mut self.bytes;
            b[m..m + 4].copy_from_slice(&MAGIC.to_ne_bytes());
            b[m + 4..m + 8].copy_from_slice(&DATA_VERSION.to_ne_bytes());
            let free = Db { pad: PS as u32, flags: MDB_INTEGERKEY, ..free };
            b[m + 24..m + 24 + DB_SIZE].copy_from_slice(&db_bytes(&free));
            b[m + 24 + DB_SIZE..m + 24 + 2 * DB_SIZE].copy_from_slice(&db_bytes(&main));
            b[m + 24 + 2 * DB_SIZE..m + 32 + 2 * DB_SIZE].copy_from_slice(&last_page.to_ne_bytes());
            b[m + 32 + 2 * DB_SIZE..m + 40 + 2 * DB_SIZE].copy_from_slice(&txnid.to_ne_bytes());
        }
    }

    fn db_bytes(db: &Db) -> Vec<u8> {
        let mut v = Vec::with_capacity(DB_SIZE);
        v.extend_from_slice(&db.pad.to_ne_bytes());
        v.extend_from_slice(&db.flags.to_ne_bytes());
        v.extend_from_slice(&db.depth.to_ne_bytes());
        for x in [db.branch_pages, db.leaf_pages, db.overflow_pages, db.entries, db.root] {
            v.extend_from_slice(&x.to_ne_bytes());
        }
        v
    }

    fn empty_db() -> Db {
        Db {
            pad: 0,
            flags: 0,
            depth: 0,
            branch_pages: 0,
            leaf_pages: 0,
            overflow_pages: 0,
            entries: 0,
            root: P_INVALID,
        }
    }

    fn tree(depth: u16, branch: u64, leaf: u64, overflow: u64, entries: u64, root: u64) -> Db {
        Db { pad: 0, flags: 0, depth, branch_pages: branch, leaf_pages: leaf, overflow_pages: overflow, entries, root }
    }

    /// A valid file: main tree (leaf 2) names database "nodes", a two-level
    /// tree (branch 3 over leaves 4 and 5) with one value on overflow pages 6-7;
    /// the free tree (leaf 8) lists page 9.
    fn valid() -> File {
        let mut f = File::new(10);
        let nodes = tree(2, 1, 2, 2, 3, 3);
        f.leaf(2, &[(b"nodes", Val::Sub(nodes))]);
        f.branch(3, &[(b"", 4), (b"m", 5)]);
        f.leaf(4, &[(b"alpha", Val::Inline(b"1")), (b"beta", Val::Big(6, 700))]);
        f.leaf(5, &[(b"omega", Val::Inline(b"22"))]);
        f.overflow(6, 2, &[7u8; 700]);
        f.header(7, 0);
        let mut list = Vec::new();
        for x in [1u64, 9] {
            list.extend_from_slice(&x.to_ne_bytes());
        }
        f.leaf(8, &[(&5u64.to_ne_bytes(), Val::Inline(&list))]);
        f.meta(0, empty_db(), empty_db(), 1, 0);
        f.meta(1, tree(1, 0, 1, 0, 1, 8), tree(1, 0, 1, 0, 1, 2), 9, 1);
        f
    }

    fn corrupt_message(bytes: &[u8]) -> String {
        match check(bytes, Meta::Newest) {
            Err(CheckError::Corrupt(msg)) => msg,
            other => panic!("expected a corruption report, got {other:?}"),
        }
    }

    #[test]
    fn a_valid_file_passes_and_reports_what_it_walked() {
        let f = valid();
        let report = check(&f.bytes, Meta::Newest).expect("valid");
        assert_eq!((report.meta_page, report.txnid, report.page_size, report.last_page), (1, 1, PS, 9));
        assert_eq!(report.pages, 7);
        assert_eq!(report.databases, vec![(b"nodes".to_vec(), 3)]);
        let old = check(&f.bytes, Meta::Page(0)).expect("the empty older snapshot");
        assert_eq!((old.pages, old.databases.len()), (0, 0));
    }

    #[test]
    fn the_snapshot_is_chosen_by_transaction_id() {
        let f = valid();
        assert_eq!(check(&f.bytes, Meta::Txnid(1)).expect("txn 1").meta_page, 1);
        assert_eq!(check(&f.bytes, Meta::Txnid(0)).expect("txn 0").meta_page, 0);
        assert_eq!(check(&f.bytes, Meta::Txnid(2)), Err(CheckError::Stale));
    }

    #[test]
    fn a_wrong_page_kind_is_refused_with_its_page_number() {
        let mut f = valid();
        f.put16(4, 10, P_BRANCH);
        let msg = corrupt_message(&f.bytes);
        assert!(msg.contains("page 4") && msg.contains("leaf page belongs"), "{msg}");
    }

    #[test]
    fn a_header_naming_another_page_is_refused() {
        let mut f = valid();
        f.page(5)[0] = 9;
        assert!(corrupt_message(&f.bytes).contains("page 5: its header names page 9"));
    }

    #[test]
    fn a_child_outside_the_file_is_refused() {
        let mut f = valid();
        f.branch(3, &[(b"", 4), (b"m", 1 << 33)]);
        assert!(corrupt_message(&f.bytes).contains("outside pages 2..=9"));
    }

    #[test]
    fn a_page_reached_twice_is_refused() {
        let mut f = valid();
        f.branch(3, &[(b"", 4), (b"m", 4)]);
        assert!(corrupt_message(&f.bytes).contains("page 4 is reached twice"));
    }

    #[test]
    fn keys_out_of_order_are_refused() {
        let mut f = valid();
        f.leaf(4, &[(b"beta", Val::Big(6, 700)), (b"alpha", Val::Inline(b"1"))]);
        assert!(corrupt_message(&f.bytes).contains("not greater than the key before it"));
        let mut f = valid();
        f.leaf(5, &[(b"a", Val::Inline(b"22"))]);
        assert!(corrupt_message(&f.bytes).contains("before the parent's separator"));
        let mut f = valid();
        f.leaf(4, &[(b"alpha", Val::Inline(b"1")), (b"zeta", Val::Big(6, 700))]);
        assert!(corrupt_message(&f.bytes).contains("at or after the next separator"));
    }

    #[test]
    fn a_node_overrunning_its_page_is_refused() {
        let mut f = valid();
        let ptr = usize::from(u16_at(f.page(5), PAGE_HEADER).unwrap());
        f.put16(5, ptr + 6, 600);
        assert!(corrupt_message(&f.bytes).contains("key overruns the page"));
        let mut f = valid();
        f.put16(5, PAGE_HEADER, 4);
        assert!(corrupt_message(&f.bytes).contains("node 0 at offset 4"));
    }

    #[test]
    fn an_overflow_run_too_short_for_its_value_is_refused() {
        let mut f = valid();
        f.page(6)[12..16].copy_from_slice(&1u32.to_ne_bytes());
        assert!(corrupt_message(&f.bytes).contains("needs 2"));
    }

    #[test]
    fn wrong_recorded_counts_are_refused() {
        let mut f = valid();
        f.leaf(2, &[(b"nodes", Val::Sub(tree(2, 1, 2, 2, 4, 3)))]);
        assert!(corrupt_message(&f.bytes).contains("but the tree holds 1, 2, 2 and 3"));
    }

    #[test]
    fn a_depth_that_disagrees_with_the_tree_is_refused() {
        let mut f = valid();
        f.leaf(2, &[(b"nodes", Val::Sub(tree(3, 1, 2, 2, 3, 3)))]);
        assert!(corrupt_message(&f.bytes).contains("branch page belongs"));
    }

    #[test]
    fn duplicate_sorted_data_is_refused() {
        let mut f = valid();
        let ptr = usize::from(u16_at(f.page(5), PAGE_HEADER).unwrap());
        f.put16(5, ptr + 4, F_DUPDATA);
        assert!(corrupt_message(&f.bytes).contains("duplicate-sorted"));
        let mut f = valid();
        f.leaf(2, &[(b"nodes", Val::Sub(Db { flags: MDB_DUPSORT, ..tree(2, 1, 2, 2, 3, 3) }))]);
        assert!(corrupt_message(&f.bytes).contains("sorted duplicates"));
    }

    #[test]
    fn a_free_list_claiming_more_pages_than_it_holds_is_refused() {
        let mut f = valid();
        let mut list = Vec::new();
        for x in [3u64, 9] {
            list.extend_from_slice(&x.to_ne_bytes());
        }
        f.leaf(8, &[(&5u64.to_ne_bytes(), Val::Inline(&list))]);
        assert!(corrupt_message(&f.bytes).contains("claims 3 pages"));
    }

    #[test]
    fn a_truncated_file_is_refused() {
        let f = valid();
        let msg = corrupt_message(&f.bytes[..8 * PS]);
        assert!(msg.contains("the last page is 9, but the file holds 8 pages"), "{msg}");
    }

    /// xorshift64*: a deterministic stream for the fuzz loops (no dependency).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..2000 {
            let len = rng.below(4 * PS);
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            for which in [Meta::Newest, Meta::Page(1), Meta::Txnid(rng.next())] {
                assert!(check(&bytes, which).is_err());
            }
        }
    }

    #[test]
    fn random_damage_to_a_valid_file_never_panics() {
        let base = valid().bytes;
        let mut rng = Rng(42);
        let mut refused = 0;
        for round in 0..20_000 {
            let mut bytes = base.clone();
            match round % 3 {
                0 => {
                    let at = rng.below(bytes.len());
                    bytes[at] ^= 1 << rng.below(8);
                }
                1 => {
                    let at = rng.below(bytes.len());
                    for b in bytes.iter_mut().skip(at).take(1 + rng.below(64)) {
                        *b = rng.next() as u8;
                    }
                }
                _ => {
                    let cut = rng.below(bytes.len());
                    bytes.truncate(cut);
                }
            }
            if check(&bytes, Meta::Newest).is_err() {
                refused += 1;
            }
        }
        assert!(refused > 5_000, "only {refused} of 20000 damaged files refused");
    }
}
