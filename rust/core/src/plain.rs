//! Plain data as msgpack, the way the Python side's packer writes it, and the graph metadata
//! record built from it.
//!
//! The encoding is msgpack's smallest form of every value, as `msgpack.Packer(use_bin_type=True)`
//! writes it: integers in the fewest bytes (unsigned forms for non-negative values), floats as
//! float64, text as str, bytes as bin. A record written here and one written by the Python
//! encoder are byte for byte the same, so either side may write and read any record.

use crate::graph_write::FORMAT_VERSION;

/// A plain value: what metadata's `custom` may hold.
#[derive(Debug, Clone, PartialEq)]
pub enum Plain {
    Nil,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Plain>),
    Map(Vec<(String, Plain)>),
}

const VEC: &str = "writing to a Vec cannot fail";

/// Appends `value`'s msgpack.
pub fn write_plain(out: &mut Vec<u8>, value: &Plain) {
    match value {
        Plain::Nil => rmp::encode::write_nil(out).expect(VEC),
        Plain::Bool(b) => rmp::encode::write_bool(out, *b).expect(VEC),
        Plain::Int(i) => {
            rmp::encode::write_sint(out, *i).expect(VEC);
        }
        Plain::UInt(u) => {
            rmp::encode::write_uint(out, *u).expect(VEC);
        }
        Plain::Float(f) => rmp::encode::write_f64(out, *f).expect(VEC),
        Plain::Str(s) => rmp::encode::write_str(out, s).expect(VEC),
        Plain::Bin(b) => rmp::encode::write_bin(out, b).expect(VEC),
        Plain::Array(items) => {
            rmp::encode::write_array_len(out, items.len() as u32).expect(VEC);
            for item in items {
                write_plain(out, item);
            }
        }
        Plain::Map(pairs) => {
            rmp::encode::write_map_len(out, pairs.len() as u32).expect(VEC);
            for (key, item) in pairs {
                rmp::encode::write_str(out, key).expect(VEC);
                write_plain(out, item);
            }
        }
    }
}

/// A node's usage record, its times in microseconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct Meta {
    pub created_us: i64,
    pub access_count: i64,
    pub last_accessed_us: Option<i64>,
    pub cumulative_reward: f64,
    pub reward_count: i64,
    pub custom: Plain,
}

/// The metadata record: the format byte, then msgpack
/// `[created_us, access_count, last_accessed_us | nil, cumulative_reward, reward_count, custom]`.
pub fn encode_meta(meta: &Meta) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION];
    rmp::encode::write_array_len(&mut out, 6).expect(VEC);
    let last = meta.last_accessed_us.map_or(Plain::Nil, Plain::Int);
    for value in
        [Plain::Int(meta.created_us), Plain::Int(meta.access_count), last, Plain::Float(meta.cumulative_reward)]
    {
        write_plain(&mut out, &value);
    }
    write_plain(&mut out, &Plain::Int(meta.reward_count));
    write_plain(&mut out, &meta.custom);
    out
}

/// Days from 1970-01-01 to the proleptic Gregorian date `year-month-day` (month and day from 1).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Microseconds since the Unix epoch of a UTC date and time (exact, no float).
pub fn micros_since_epoch(date: (i64, i64, i64), time: (i64, i64, i64, i64)) -> i64 {
    let (hour, minute, second, micro) = time;
    let seconds = days_from_civil(date.0, date.1, date.2) * 86_400 + hour * 3_600 + minute * 60 + second;
    seconds * 1_000_000 + micro
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_and_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(days_from_civil(1, 1, 1), -719_162);
        assert_eq!(days_from_civil(9999, 12, 31), 2_932_896);
        assert_eq!(micros_since_epoch((2026, 12, 7), (17, 30, 5, 42)), 1_796_664_605_000_042);
    }

    #[test]
    fn every_date_follows_the_one_before() {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let mut expected = days_from_civil(1, 1, 1);
        for year in 1..=2400 {
            for month in 1..=12 {
                let days = match month {
                    2 if leap(year) => 29,
                    2 => 28,
                    4 | 6 | 9 | 11 => 30,
                    _ => 31,
                };
                for day in 1..=days {
                    assert_eq!(days_from_civil(year, month, day), expected, "{year}-{month}-{day}");
                    expected += 1;
                }
            }
        }
    }

    #[test]
    fn integers_take_their_smallest_form() {
        let cases: [(Plain, &[u8]); 9] = [
            (Plain::Int(5), &[0x05]),
            (Plain::Int(-1), &[0xff]),
            (Plain::Int(-33), &[0xd0, 0xdf]),
            (Plain::Int(200), &[0xcc, 0xc8]),
            (Plain::Int(-200), &[0xd1, 0xff, 0x38]),
            (Plain::UInt(u64::MAX), &[0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            (Plain::Float(1.5), &[0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0]),
            (Plain::Bin(b"ab".to_vec()), &[0xc4, 0x02, b'a', b'b']),
            (
                Plain::Map(vec![("k".to_string(), Plain::Array(vec![Plain::Nil, Plain::Bool(true)]))]),
                &[0x81, 0xa1, b'k', 0x92, 0xc0, 0xc3],
            ),
        ];
        for (value, bytes) in cases {
            let mut out = Vec::new();
            write_plain(&mut out, &value);
            assert_eq!(out, bytes, "{value:?}");
        }
    }

    #[test]
    fn a_metadata_record() {
        let meta = Meta {
            created_us: 1,
            access_count: 2,
            last_accessed_us: None,
            cumulative_reward: 0.0,
            reward_count: 0,
            custom: Plain::Map(Vec::new()),
        };
        assert_eq!(encode_meta(&meta), [1, 0x96, 1, 2, 0xc0, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80]);
    }
}
