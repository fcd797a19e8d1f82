fn main() {
    let (c, s) = mk::model::ops::rope_tables(47, 64, 1e7);
    println!("cos {:?} sin {:?}", &c[..4], &s[..4]);
}
