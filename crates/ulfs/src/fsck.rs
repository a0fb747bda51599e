pub struct FsckOptions;
pub struct FsckReport;
pub fn fsck() {}
