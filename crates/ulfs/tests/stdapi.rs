//! The std-like layer: `File` as Read + Write + Seek, directory helpers,
//! and the thread-safe wrapper used from several threads at once.

use std::io::{Read, Seek, SeekFrom, Write};
use ulfs::{
    File, Fs, MkfsOptions, MountOptions, SharedFs, create_dir_all, metadata, mkfs, read_dir,
    remove_dir_all,
};

fn shared() -> (tempfile::TempDir, SharedFs) {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("t.img");
    mkfs(
        &img,
        &MkfsOptions {
            size: 32 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    (
        dir,
        SharedFs::new(Fs::mount(&img, MountOptions::default()).unwrap()),
    )
}

#[test]
fn file_read_write_seek() {
    let (_d, fs) = shared();
    create_dir_all(&fs, "/a/b/c").unwrap();
    create_dir_all(&fs, "/a/b/c/").unwrap();
    assert!(metadata(&fs, "/a/b/c").unwrap().is_dir());
    let mut f = File::create(&fs, "/a/b/c/file").unwrap();
    f.write_all(b"0123456789").unwrap();
    assert_eq!(f.seek(SeekFrom::End(-3)).unwrap(), 7);
    f.write_all(b"XYZW").unwrap();
    drop(f);
    let mut s = String::new();
    File::open(&fs, "/a/b/c/file")
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "0123456XYZW");
    let err = File::open(&fs, "/a/missing").err().unwrap();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    let f = File::open(&fs, "/a/b/c/file").unwrap();
    assert_eq!(f.metadata().unwrap().size, 11);
}

#[test]
fn read_dir_and_remove_dir_all() {
    let (_d, fs) = shared();
    create_dir_all(&fs, "/t/sub").unwrap();
    for n in ["x", "y", "z"] {
        File::create(&fs, format!("/t/{n}")).unwrap();
        File::create(&fs, format!("/t/sub/{n}")).unwrap();
    }
    fs.lock().symlink("x", "/t/link").unwrap();
    let mut names: Vec<_> = read_dir(&fs, "/t")
        .unwrap()
        .map(|e| e.unwrap().name)
        .collect();
    names.sort();
    assert_eq!(names, [&b"link"[..], b"sub", b"x", b"y", b"z"]);
    remove_dir_all(&fs, "/t").unwrap();
    assert!(metadata(&fs, "/t").is_err());
    assert_eq!(read_dir(&fs, "/").unwrap().count(), 0);
}

#[test]
fn threads_share_one_fs() {
    let (_d, fs) = shared();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    let mut f = File::create(&fs, format!("/t{t}-{i}")).unwrap();
                    f.write_all(&[t as u8; 1000]).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(read_dir(&fs, "/").unwrap().count(), 200);
    let mut buf = Vec::new();
    File::open(&fs, "/t3-49")
        .unwrap()
        .read_to_end(&mut buf)
        .unwrap();
    assert_eq!(buf, vec![3u8; 1000]);
    fs.into_inner().unwrap().unmount().unwrap();
}
