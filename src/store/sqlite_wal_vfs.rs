//! A VFS over SQLite's own that writes a commit's WAL frames in one system
//! call.
//!
//! SQLite appends each frame of the WAL as two `pwrite`s: the frame's
//! 24-byte header, then its page. A job's two commits touch about thirteen
//! pages, so a request cost 26 `pwrite`s of the WAL — the largest count of
//! system calls a request made (`strace -c`: 29 `pwrite`s a request at one
//! client, 9 at sixteen). This VFS is the platform's default VFS in every
//! call except the writes to a `-wal` file: there, a write that continues
//! the one before it is gathered in memory, and what is gathered goes to the
//! file in one write when the commit frame is complete, or before any other
//! call on the file (a read, a sync, a truncate, a size, a close), or at
//! [`GATHER_LIMIT`]. Measured the same way after: 1.9 `pwrite`s of the WAL
//! a request at one client, 0.2 at sixteen.
//!
//! Why nothing unwritten can be read: SQLite makes a commit's frames visible
//! by updating the WAL index in shared memory after its last write returns,
//! and that last write is the commit frame's page (or, when checksums are
//! rewritten, the commit frame's header) — both are written before the call
//! returns, so a failure is the commit's error. Gathering starts only at a
//! frame that is not a commit's, so nothing else is ever left gathered. Frames that are not a
//! commit's (a transaction spilling its cache) are not visible to others,
//! and this connection reads them only through `xRead`, which writes what
//! is gathered first. A gathered write that fails is dropped with the error:
//! SQLite then rolls the transaction back, and frames past the WAL index's
//! end are never read.
//!
//! Files other than a WAL are opened by the default VFS in place, so their
//! calls go straight to it.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::OnceLock;

use rusqlite::ffi;

/// The name connections open with ([`name`]).
const NAME: &std::ffi::CStr = c"intentgate-wal";

/// The most a WAL file gathers before writing it (a transaction larger than
/// this is written in several calls; it is not visible until it commits).
const GATHER_LIMIT: usize = 1 << 20;

/// The most the Unix VFS writes in one call (`seekAndWriteFd` keeps the
/// low 17 bits of a length).
const MOST_AT_ONCE: usize = 0x1_ffff;

/// A frame's header: page number, database size after a commit (zero for a
/// frame that is not a commit's), salts, checksums.
const FRAME_HEADER: usize = 24;

/// The WAL's own header, before the first frame.
const WAL_HEADER: i64 = 32;

/// Registers the VFS (once) and returns the name to open connections with.
pub(super) fn name() -> &'static std::ffi::CStr {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        // SAFETY: `sqlite3_vfs_find(NULL)` returns the default VFS, which
        // lives as long as the process; the copy made from it is leaked, so
        // it does too, as `sqlite3_vfs_register` requires.
        unsafe {
            let default = ffi::sqlite3_vfs_find(ptr::null());
            assert!(!default.is_null(), "SQLite has no default VFS");
            DEFAULT.get_or_init(|| Vfs(default));
            let mut vfs = *default;
            vfs.zName = NAME.as_ptr();
            vfs.szOsFile =
                c_int::try_from(std::mem::size_of::<WalFile>()).unwrap_or(c_int::MAX) + (*default).szOsFile;
            vfs.xOpen = Some(open);
            vfs.pNext = ptr::null_mut();
            let rc = ffi::sqlite3_vfs_register(Box::into_raw(Box::new(vfs)), 0);
            assert_eq!(rc, ffi::SQLITE_OK, "cannot register the WAL-gathering VFS");
        }
    });
    NAME
}

/// The default VFS, which every call reaches.
struct Vfs(*mut ffi::sqlite3_vfs);
// SAFETY: the default VFS is immutable once registered and SQLite calls it
// from any thread.
unsafe impl Send for Vfs {}
unsafe impl Sync for Vfs {}
static DEFAULT: OnceLock<Vfs> = OnceLock::new();

/// An open WAL file: SQLite's handle (its `pMethods` are [`METHODS`]), what
/// is gathered, and the default VFS's handle, which lives in the bytes
/// right after this struct (`szOsFile` counts both).
#[repr(C)]
struct WalFile {
    base: ffi::sqlite3_file,
    gathered: *mut Gathered,
}

/// Writes not yet made: `bytes` belong at `start`.
#[derive(Default)]
struct Gathered {
    start: i64,
    bytes: Vec<u8>,
    /// Where the page of a commit frame whose header was just written goes:
    /// the write there completes the commit, and is written at once with
    /// what was gathered before it.
    commit_page_at: Option<i64>,
}

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(default) = DEFAULT.get().map(|vfs| vfs.0) else { return ffi::SQLITE_ERROR };
    // SAFETY: SQLite gives `file` `szOsFile` bytes; the default VFS's handle
    // fits there alone, or after a `WalFile`.
    unsafe {
        let Some(default_open) = (*default).xOpen else { return ffi::SQLITE_ERROR };
        if flags & ffi::SQLITE_OPEN_WAL == 0 {
            return default_open(default, name, file, flags, out_flags);
        }
        let wal = file.cast::<WalFile>();
        (*wal).base.pMethods = ptr::null();
        let rc = default_open(default, name, inner(wal), flags, out_flags);
        if rc == ffi::SQLITE_OK {
            (*wal).gathered = Box::into_raw(Box::default());
            (*wal).base.pMethods = &METHODS;
        }
        rc
    }
}

/// The default VFS's handle of `wal`.
///
/// # Safety
/// `wal` was opened by [`open`].
unsafe fn inner(wal: *mut WalFile) -> *mut ffi::sqlite3_file {
    // SAFETY: see `WalFile`: it is laid out right after the struct.
    unsafe { wal.cast::<u8>().add(std::mem::size_of::<WalFile>()).cast() }
}

/// The default VFS's methods for `file`, and its handle.
///
/// # Safety
/// `file` was opened by [`open`] as a WAL.
unsafe fn default_of(
    file: *mut ffi::sqlite3_file,
) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    // SAFETY: the default VFS set its handle's methods when it opened it,
    // and they are static.
    unsafe {
        let handle = inner(file.cast());
        (handle, &*(*handle).pMethods)
    }
}

/// Writes what `file` gathered, in one call; empty afterwards, written or
/// not.
///
/// # Safety
/// `file` was opened by [`open`] as a WAL.
unsafe fn flush(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `gathered` is this file's, used by one thread at a time
    // (SQLite serialises a connection's calls).
    unsafe { write_out(file, &mut *(*file.cast::<WalFile>()).gathered) }
}

/// [`flush`], given the file's `gathered` already borrowed.
///
/// # Safety
/// `file` was opened by [`open`] as a WAL, and `gathered` is its own.
unsafe fn write_out(file: *mut ffi::sqlite3_file, gathered: &mut Gathered) -> c_int {
    if gathered.bytes.is_empty() {
        return ffi::SQLITE_OK;
    }
    // SAFETY: as the caller promised.
    let rc = unsafe { write_through(file, &gathered.bytes, gathered.start) };
    gathered.bytes.clear();
    rc
}

/// Writes `bytes` at `offset` through the default VFS, in as few calls as
/// it takes: the Unix VFS writes at most [`MOST_AT_ONCE`] bytes a call (it
/// masks a larger length to that many bits, and reports a length that
/// masks to zero as a full disk).
///
/// # Safety
/// `file` was opened by [`open`] as a WAL.
unsafe fn write_through(file: *mut ffi::sqlite3_file, bytes: &[u8], offset: i64) -> c_int {
    // SAFETY: as the caller promised.
    let (handle, methods) = unsafe { default_of(file) };
    let Some(write) = methods.xWrite else { return ffi::SQLITE_IOERR_WRITE };
    let mut at = offset;
    for chunk in bytes.chunks(MOST_AT_ONCE) {
        count_write();
        // SAFETY: `chunk` is valid for its length, which fits a `c_int`.
        let rc = unsafe { write(handle, chunk.as_ptr().cast(), chunk.len() as c_int, at) };
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        at += chunk.len() as i64;
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: SQLite passes `amount` readable bytes at `data`; `file` is a
    // WAL opened by `open` (these methods are only a WAL's).
    unsafe {
        let bytes = std::slice::from_raw_parts(data.cast::<u8>(), usize::try_from(amount).unwrap_or(0));
        let gathered = &mut *(*file.cast::<WalFile>()).gathered;
        let follows = !gathered.bytes.is_empty()
            && usize::try_from(offset - gathered.start).is_ok_and(|at| at == gathered.bytes.len());
        if !follows {
            let rc = write_out(file, gathered);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            gathered.start = offset;
        }
        let completes_commit = gathered.commit_page_at.take() == Some(offset);
        let frame_header = bytes.len() == FRAME_HEADER && offset >= WAL_HEADER;
        let commit_header = frame_header && bytes[4..8] != [0, 0, 0, 0];
        if commit_header {
            gathered.commit_page_at = Some(offset + FRAME_HEADER as i64);
        }
        // Gathering starts only at the header of a frame that is not a
        // commit's, so it always ends with a commit frame's page, or before
        // another call. Anything else that follows nothing gathered is
        // written at once: the WAL's header (a sync follows), a page
        // rewritten in place, the rest of a write split at a sync, and a
        // commit frame's header — the first frame of a one-page commit, or
        // SQLite rewriting a transaction's checksums, which writes headers
        // alone and publishes the frames right after the last.
        if !follows && (commit_header || !frame_header) {
            return write_through(file, bytes, offset);
        }
        gathered.bytes.extend_from_slice(bytes);
        if completes_commit || gathered.bytes.len() >= GATHER_LIMIT {
            write_out(file, gathered)
        } else {
            ffi::SQLITE_OK
        }
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `file` is a WAL opened by `open`; SQLite calls nothing on it
    // after this, so its gathered writes are freed here.
    unsafe {
        let written = flush(file);
        let (handle, methods) = default_of(file);
        let closed = methods.xClose.map_or(ffi::SQLITE_OK, |close| close(handle));
        let wal = file.cast::<WalFile>();
        drop(Box::from_raw((*wal).gathered));
        (*wal).gathered = ptr::null_mut();
        if written != ffi::SQLITE_OK { written } else { closed }
    }
}

/// Defines a method that writes what is gathered, then hands the call to
/// the default VFS's method of the same name.
macro_rules! after_flush {
    ($name:ident, $method:ident ( $($arg:ident : $ty:ty),* )) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file, $($arg: $ty),*) -> c_int {
            // SAFETY: `file` is a WAL opened by `open`; the arguments are
            // SQLite's, passed on unchanged.
            unsafe {
                let rc = flush(file);
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
                let (handle, methods) = default_of(file);
                match methods.$method {
                    Some(method) => method(handle, $($arg),*),
                    None => ffi::SQLITE_IOERR,
                }
            }
        }
    };
}

after_flush!(read, xRead(data: *mut c_void, amount: c_int, offset: i64));
after_flush!(truncate, xTruncate(size: i64));
after_flush!(sync, xSync(flags: c_int));
after_flush!(file_size, xFileSize(size: *mut i64));
after_flush!(lock, xLock(level: c_int));
after_flush!(unlock, xUnlock(level: c_int));
after_flush!(check_reserved_lock, xCheckReservedLock(out: *mut c_int));
after_flush!(file_control, xFileControl(op: c_int, arg: *mut c_void));

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `file` is a WAL opened by `open`.
    unsafe {
        let (handle, methods) = default_of(file);
        methods.xSectorSize.map_or(4096, |method| method(handle))
    }
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `file` is a WAL opened by `open`.
    unsafe {
        let (handle, methods) = default_of(file);
        methods.xDeviceCharacteristics.map_or(0, |method| method(handle))
    }
}

/// A WAL's methods. Version 1: SQLite maps shared memory and pages through
/// the main database file, never through its WAL.
static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 1,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

#[cfg(test)]
thread_local! {
    /// Writes this thread's WAL files made.
    static WAL_WRITES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn count_write() {
    #[cfg(test)]
    WAL_WRITES.with(|writes| writes.set(writes.get() + 1));
}
/// WAL writes made on this thread since the last call.
#[cfg(test)]
pub(super) fn take_wal_writes() -> usize {
    WAL_WRITES.with(|writes| writes.replace(0))
}
#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::{Connection, OpenFlags};

    fn temp_db(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("intentgate-wal-vfs-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("db")
    }

    fn open_gathering(path: &std::path::Path) -> Connection {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        let conn = Connection::open_with_flags_and_vfs(path, flags, name()).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)").unwrap();
        conn
    }

    /// A copy of the database and its WAL as a crash would leave them: a
    /// connection opening it recovers the WAL, checking every frame's
    /// checksum, and keeps only frames up to the last valid commit.
    fn recovered(path: &std::path::Path) -> Connection {
        let copy = path.with_file_name("recovered");
        std::fs::copy(path, &copy).unwrap();
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let mut copied_wal = copy.as_os_str().to_owned();
        copied_wal.push("-wal");
        std::fs::copy(&wal, &copied_wal).unwrap();
        Connection::open(&copy).unwrap()
    }

    fn rows(conn: &Connection) -> (i64, i64) {
        conn.query_row("SELECT count(*), coalesce(sum(length(body)), 0) FROM t", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap()
    }

    #[test]
    fn a_commit_reaches_the_wal_in_one_write() {
        let path = temp_db("one-write");
        let conn = open_gathering(&path);
        take_wal_writes();
        let tx = conn.unchecked_transaction().unwrap();
        for id in 0..40 {
            tx.execute("INSERT INTO t VALUES (?1, ?2)", (id, "x".repeat(2_000))).unwrap();
        }
        tx.commit().unwrap();
        // Forty rows of 2 KB are about twenty pages: forty writes without
        // gathering.
        assert_eq!(take_wal_writes(), 1, "one write for the whole commit");
        // Another connection, through the default VFS, reads every row, and
        // so does one recovering the WAL from the file alone.
        let other = Connection::open(&path).unwrap();
        assert_eq!(rows(&other), (40, 80_000));
        assert_eq!(rows(&recovered(&path)), (40, 80_000));
    }

    #[test]
    fn frames_spilled_and_rewritten_in_a_transaction_survive_recovery() {
        let path = temp_db("spill");
        let conn = open_gathering(&path);
        // A cache this small spills the transaction's pages to the WAL, and
        // writing them again rewrites frames in place and their checksums.
        conn.pragma_update(None, "cache_size", 10).unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        for id in 0..200 {
            tx.execute("INSERT INTO t VALUES (?1, ?2)", (id, "y".repeat(1_500))).unwrap();
        }
        tx.execute("UPDATE t SET body = body || 'z'", []).unwrap();
        tx.commit().unwrap();
        conn.execute("UPDATE t SET body = 'short' WHERE id < 100", []).unwrap();
        let expected = (200, 100 * 5 + 100 * 1_501);
        assert_eq!(rows(&Connection::open(&path).unwrap()), expected);
        let recovered = recovered(&path);
        assert_eq!(rows(&recovered), expected);
        let check: String = recovered.query_row("PRAGMA integrity_check", [], |row| row.get(0)).unwrap();
        assert_eq!(check, "ok");
    }

    #[test]
    fn commits_padded_to_a_sector_and_synced_are_read_whole() {
        // Without powersafe overwrite, `FULL` pads a commit with copies of
        // its last frame up to the sector's end and splits the write that
        // crosses it around a sync: the split's second half is still a
        // frame readers may read.
        let path = temp_db("padded");
        let uri = format!("file:{}?psow=0", path.display());
        let flags =
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags_and_vfs(&uri, flags, name()).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)").unwrap();
        let other = Connection::open(&path).unwrap();
        for id in 0..30 {
            conn.execute("INSERT INTO t VALUES (?1, ?2)", (id, "p".repeat(100 * (id as usize + 1)))).unwrap();
            let expected = (id + 1, (1..=id + 1).map(|n| 100 * n).sum::<i64>());
            assert_eq!(rows(&other), expected);
        }
        assert_eq!(rows(&recovered(&path)), (30, 46_500));
    }

    #[test]
    fn a_rolled_back_transaction_leaves_nothing_readable() {
        let path = temp_db("rollback");
        let conn = open_gathering(&path);
        conn.execute("INSERT INTO t VALUES (1, 'kept')", []).unwrap();
        conn.pragma_update(None, "cache_size", 10).unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        for id in 2..300 {
            tx.execute("INSERT INTO t VALUES (?1, ?2)", (id, "w".repeat(1_500))).unwrap();
        }
        tx.rollback().unwrap();
        assert_eq!(rows(&conn), (1, 4));
        assert_eq!(rows(&Connection::open(&path).unwrap()), (1, 4));
        assert_eq!(rows(&recovered(&path)), (1, 4));
    }
}
