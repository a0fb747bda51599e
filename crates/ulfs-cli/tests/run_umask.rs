//! The program's umask applies to files it creates in the image, as the
//! kernel applies it (crates/ulfs-preload umask.rs): set by the shell, by
//! the program (`os.umask`), inherited from the parent of `ulfs run`,
//! across fork and exec, for files, directories and temporary files. The
//! modes are compared, file for file, with the same script on a host
//! directory, in process and through `ulfs serve`. (Before, image files
//! got 022's modes whatever the program set: `umask 077` made 0644 files.)

use std::path::Path;
use ulfs_testkit::kernel_diff::{Diff, script};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

/// `$1`: the directory to work in. Prints every file's mode, sorted.
const SCRIPT: &str = r#"
set -e
cd "$1"
touch inherited
umask 077
touch private; mkdir private-dir
umask 002
touch group; mkdir group-dir
umask 027
sh -c 'touch child; mkdir child-dir'
python3 - <<'PY'
import os, tempfile
open('python', 'w').close()
os.umask(0o066)
open('python-066', 'w').close()
os.mkdir('python-dir-066')
fd, name = tempfile.mkstemp(dir='.', prefix='tmp-')
os.rename(name, 'mkstemp')
os.rename(tempfile.mkdtemp(dir='.', prefix='tmp-'), 'mkdtemp')
pid = os.fork()
if pid == 0:
    os.umask(0o007)
    open('forked-007', 'w').close()
    os._exit(0)
os.waitpid(pid, 0)
open('parent-after-fork', 'w').close()
os.system('touch spawned')
PY
for f in *; do stat -c '%A %n' "$f"; done
"#;

#[test]
fn files_made_in_the_image_get_the_programs_umask() {
    let dir = tempfile::tempdir().unwrap();
    // Inherited by the program (and by `ulfs run`) from its parent: 037.
    let kernel = Diff {
        ulfs: Path::new(ULFS),
        argv: &script("sh", SCRIPT),
        wrapper: &["sh", "-c", "umask 037; exec \"$@\"", "parent"],
        with_stderr: false,
    }
    .agree(dir.path(), true);
    assert!(kernel.contains("-rw------- private"), "{kernel}");
}
