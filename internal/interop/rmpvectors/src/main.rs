// Golden vectors for the Go msgpack codec: each line is a case name and the
// hex of rmp_serde::to_vec of one value. The Go side encodes its own value of
// the matching Go type and must produce the same bytes.
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize)]
struct Token {
    id: u32,
    text: String,
    logprob: f32,
}

#[derive(Serialize)]
struct Inner {
    a: i64,
    b: bool,
}

#[derive(Serialize)]
struct Outer {
    name: String,
    inner: Inner,
    tags: Vec<String>,
    grid: Vec<Vec<i32>>,
    maybe: Option<u64>,
    none: Option<String>,
    tok: Option<Token>,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Id(u64);

#[derive(Serialize)]
struct Pair(i32, String);

#[derive(Serialize)]
struct Blob {
    raw: Vec<u8>,
    #[serde(with = "serde_bytes")]
    bytes: Vec<u8>,
}

#[derive(Serialize)]
enum Finish {
    Stop,
    Length,
}

#[derive(Serialize)]
enum Event {
    Tick,
    Text(String),
    Pos(i32, i32),
    Done { tokens: u32, reason: Finish },
}

fn show<T: Serialize + ?Sized>(name: &str, v: &T) {
    let b = rmp_serde::to_vec(v).expect("encode");
    let hex: String = b.iter().map(|x| format!("{:02x}", x)).collect();
    println!("{} {}", name, hex);
}

fn main() {
    // integers: every width and sign boundary
    show("u8_0", &0u8);
    show("u8_127", &127u8);
    show("u8_128", &128u8);
    show("u8_255", &255u8);
    show("u16_256", &256u16);
    show("u16_max", &u16::MAX);
    show("u32_65536", &65536u32);
    show("u32_max", &u32::MAX);
    show("u64_4294967296", &4294967296u64);
    show("u64_max", &u64::MAX);
    show("i8_1", &1i8);
    show("i8_127", &127i8);
    show("i8_m1", &-1i8);
    show("i8_m32", &-32i8);
    show("i8_m33", &-33i8);
    show("i8_min", &i8::MIN);
    show("i16_200", &200i16);
    show("i16_m129", &-129i16);
    show("i16_min", &i16::MIN);
    show("i32_70000", &70000i32);
    show("i32_m32769", &-32769i32);
    show("i32_min", &i32::MIN);
    show("i64_m2147483649", &-2147483649i64);
    show("i64_min", &i64::MIN);
    show("i64_max", &i64::MAX);
    // other scalars
    show("bool_true", &true);
    show("bool_false", &false);
    show("f32_1_5", &1.5f32);
    show("f64_m2_25", &-2.25f64);
    show("char_x", &'x');
    // strings: each header size
    show("str_empty", "");
    show("str_a", "a");
    show("str_utf8", "héllo");
    show("str_31", &"s".repeat(31));
    show("str_32", &"s".repeat(32));
    show("str_255", &"s".repeat(255));
    show("str_256", &"s".repeat(256));
    show("str_65536", &"s".repeat(65536));
    // structs, tuples, newtypes
    show("token", &Token { id: 7, text: "hi".into(), logprob: -0.5 });
    show("outer", &Outer {
        name: "n".into(),
        inner: Inner { a: -3, b: true },
        tags: vec!["x".into(), "yz".into()],
        grid: vec![vec![1, 2], vec![], vec![-300]],
        maybe: Some(1 << 40),
        none: None,
        tok: Some(Token { id: 300, text: "".into(), logprob: 0.25 }),
    });
    show("outer_empty", &Outer {
        name: "".into(),
        inner: Inner { a: 0, b: false },
        tags: vec![],
        grid: vec![],
        maybe: None,
        none: None,
        tok: None,
    });
    show("empty_struct", &Empty {});
    show("unit", &());
    show("newtype_id", &Id(42));
    show("tuple_struct", &Pair(-1, "p".into()));
    show("tuple", &(1u8, "t", false));
    // sequences and bytes
    show("vec_u32_empty", &Vec::<u32>::new());
    show("vec_u16_16", &(0u16..16).map(|i| i * 1000).collect::<Vec<_>>());
    show("vec_vec_str", &vec![vec!["a".to_string()], vec![], vec!["b".into(), "c".into()]]);
    show("blob", &Blob { raw: vec![1, 200, 3], bytes: vec![1, 200, 3] });
    show("vec_u8_plain", &vec![0u8, 127, 128, 255]);
    show("bytes_serde_bytes", serde_bytes::Bytes::new(&[0u8, 127, 128, 255]));
    // optionals
    show("opt_none", &Option::<i32>::None);
    show("opt_some_5", &Some(5i32));
    show("opt_some_token", &Some(Token { id: 1, text: "a".into(), logprob: 1.0 }));
    show("vec_opt", &vec![Some(1u8), None, Some(3)]);
    // maps (BTreeMap: sorted keys, as the Go codec sorts)
    let mut m1 = BTreeMap::new();
    m1.insert("a".to_string(), 1u32);
    m1.insert("b".to_string(), 300u32);
    show("map_str_u32", &m1);
    let mut m2 = BTreeMap::new();
    m2.insert(2u32, "y".to_string());
    m2.insert(1u32, "x".to_string());
    show("map_u32_str", &m2);
    show("map_empty", &BTreeMap::<String, i32>::new());
    let m3: BTreeMap<String, u8> = (0..16u8).map(|i| (format!("k{:02}", i), i)).collect();
    show("map_16", &m3);
    let mut m4 = BTreeMap::new();
    m4.insert("t".to_string(), vec![Token { id: 2, text: "b".into(), logprob: 0.0 }]);
    show("map_str_vec_token", &m4);
    // enums
    show("enum_unit", &Finish::Stop);
    show("enum_unit_length", &Finish::Length);
    show("enum_unit_in_data", &Event::Tick);
    show("enum_newtype", &Event::Text("hey".into()));
    show("enum_tuple", &Event::Pos(1, -2));
    show("enum_struct", &Event::Done { tokens: 9, reason: Finish::Length });
}
