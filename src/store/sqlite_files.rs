//! The SQLite files' permissions. They hold every prompt and answer, so the
//! directory the gateway creates for them is 0700 and the database 0600,
//! whatever the process umask: with the usual 022 they would be 0755 and
//! 0644, readable by every local user. SQLite gives the `-wal` and `-shm`
//! files it creates the main file's mode, so creating the main file 0600
//! before SQLite opens it covers them too; files left by an earlier run are
//! tightened to 0600.

use std::io;
use std::path::Path;

/// Creates the database's directory (0700) and file (0600) if missing, and
/// takes group and other access away from the database files that exist.
pub(super) fn prepare(db: &Path) -> io::Result<()> {
    if db.as_os_str().is_empty() || db.as_os_str() == ":memory:" {
        return Ok(());
    }
    if let Some(parent) = db.parent()
        && !parent.as_os_str().is_empty()
        && !parent.exists()
    {
        create_private_dir(parent)?;
    }
    create_private_file(db)?;
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        tighten(Path::new(&name))?;
    }
    Ok(())
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    // The umask may have taken bits away, never added any; set it exactly.
    set_mode(dir, 0o700)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn create_private_file(db: &Path) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(db) {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) => Err(err),
    }
}

#[cfg(not(unix))]
fn create_private_file(_db: &Path) -> io::Result<()> {
    Ok(())
}

/// 0600 for an existing file with group or other bits; nothing if absent.
#[cfg(unix)]
fn tighten(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o077 != 0 => set_mode(path, 0o600),
        Ok(_) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

#[cfg(not(unix))]
fn tighten(_path: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}
