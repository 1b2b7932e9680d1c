//! A restricted pickle codec: plain data only, no code execution.
//!
//! [`from_slice`] understands the opcodes that `pickle.dump` emits for
//! dicts, lists, tuples, strings, bytes, numbers, booleans, `None`, sets and
//! the memo (protocols 0-5, binary forms). Object construction is refused:
//! `GLOBAL`/`STACK_GLOBAL` are accepted only for an allowlist of plain
//! container types — `collections.OrderedDict` (decoded as a dict) and
//! `builtins.set`/`builtins.frozenset` (decoded as a list) — and `REDUCE` only
//! applies those; any other global, and `BUILD`, `INST`, `OBJ`, `NEWOBJ`,
//! `NEWOBJ_EX`, `EXT*`, persistent ids and out-of-band buffers, is an error
//! naming the opcode or global. Nesting depth (1000) and memo expansion are
//! bounded so a hostile pickle cannot exhaust the stack or memory.
//!
//! [`to_vec`] writes protocol 2 with only the opcodes `torch.utils.viz`'s
//! `MemoryViz.js` unpickler understands.

use crate::error::AllocError;
use std::collections::HashMap;

/// A decoded pickle value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True`/`False`.
    Bool(bool),
    /// An integer that fits in 64 bits.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A bytes object.
    Bytes(Vec<u8>),
    /// A list (sets and frozensets decode to lists too).
    List(Vec<Value>),
    /// A tuple.
    Tuple(Vec<Value>),
    /// A dict, in insertion order.
    Dict(Vec<(Value, Value)>),
}

impl Value {
    /// Looks up a string key in a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The integer, if this is one (booleans count as 0/1).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, if this is a list or tuple.
    pub fn as_seq(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) | Value::Tuple(v) => Some(v),
            _ => None,
        }
    }

    /// A short type name for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
        }
    }
}

const MAX_DEPTH: u32 = 1000;
const MAX_EXPANSION: u64 = 1 << 24;

#[derive(Debug, Clone)]
enum Item {
    Val(Value, u32),
    Mark,
    Global(Allowed),
}

#[derive(Debug, Clone, Copy)]
enum Allowed {
    OrderedDict,
    Set,
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    op_at: usize,
    stack: Vec<Item>,
    memo: HashMap<u32, Item>,
    expansion: u64,
}

fn count_nodes(v: &Value) -> u64 {
    match v {
        Value::List(xs) | Value::Tuple(xs) => 1 + xs.iter().map(count_nodes).sum::<u64>(),
        Value::Dict(xs) => {
            1 + xs
                .iter()
                .map(|(k, v)| count_nodes(k) + count_nodes(v))
                .sum::<u64>()
        }
        Value::Str(s) => 1 + s.len() as u64 / 64,
        Value::Bytes(b) => 1 + b.len() as u64 / 64,
        _ => 1,
    }
}

impl<'a> Reader<'a> {
    fn err<T>(&self, reason: impl Into<String>) -> Result<T, AllocError> {
        Err(AllocError::Pickle {
            offset: self.op_at,
            reason: reason.into(),
        })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], AllocError> {
        match self.pos.checked_add(n) {
            Some(end) if end <= self.data.len() => {
                let s = &self.data[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            _ => self.err("truncated pickle"),
        }
    }

    fn u8(&mut self) -> Result<u8, AllocError> {
        Ok(self.take(1)?[0])
    }

    fn u32le(&mut self) -> Result<u32, AllocError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64le(&mut self) -> Result<u64, AllocError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn len_u64(&mut self) -> Result<usize, AllocError> {
        let n = self.u64le()?;
        usize::try_from(n).or_else(|_| self.err("length too large"))
    }

    fn line(&mut self) -> Result<&'a [u8], AllocError> {
        let rest = &self.data[self.pos..];
        match rest.iter().position(|&c| c == b'\n') {
            Some(i) => {
                self.pos += i + 1;
                Ok(&rest[..i])
            }
            None => self.err("truncated pickle (missing newline)"),
        }
    }

    fn utf8(&self, b: &[u8]) -> Result<String, AllocError> {
        match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => self.err("invalid UTF-8 in string"),
        }
    }

    fn push(&mut self, v: Value) {
        self.stack.push(Item::Val(v, 0));
    }

    fn pop(&mut self) -> Result<Item, AllocError> {
        match self.stack.pop() {
            Some(i) => Ok(i),
            None => self.err("stack underflow"),
        }
    }

    fn pop_val(&mut self) -> Result<(Value, u32), AllocError> {
        match self.pop()? {
            Item::Val(v, d) => Ok((v, d)),
            Item::Mark => self.err("unexpected MARK"),
            Item::Global(_) => self.err("a global used as a value"),
        }
    }

    /// Pops everything above the topmost MARK.
    fn pop_mark(&mut self) -> Result<Vec<(Value, u32)>, AllocError> {
        let Some(m) = self.stack.iter().rposition(|i| matches!(i, Item::Mark)) else {
            return self.err("no MARK on the stack");
        };
        let items: Vec<Item> = self.stack.drain(m..).skip(1).collect();
        let mut out = Vec::with_capacity(items.len());
        for it in items {
            match it {
                Item::Val(v, d) => out.push((v, d)),
                _ => return self.err("a global or MARK inside a container"),
            }
        }
        Ok(out)
    }

    fn container(
        &self,
        items: Vec<(Value, u32)>,
        f: fn(Vec<Value>) -> Value,
    ) -> Result<Item, AllocError> {
        let depth = items.iter().map(|x| x.1).max().map_or(1, |d| d + 1);
        if depth > MAX_DEPTH {
            return self.err("nesting too deep");
        }
        Ok(Item::Val(
            f(items.into_iter().map(|x| x.0).collect()),
            depth,
        ))
    }

    fn pairs(&self, items: Vec<(Value, u32)>) -> Result<(Vec<(Value, Value)>, u32), AllocError> {
        if items.len() % 2 != 0 {
            return self.err("odd number of items for a dict");
        }
        let depth = items.iter().map(|x| x.1).max().unwrap_or(0);
        let mut it = items.into_iter().map(|x| x.0);
        let mut out = Vec::new();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            out.push((k, v));
        }
        Ok((out, depth))
    }

    /// Adds key/value pairs (or list elements) to the container on top of the stack.
    fn extend_top(&mut self, items: Vec<(Value, u32)>, as_dict: bool) -> Result<(), AllocError> {
        let (pairs, child_depth) = if as_dict {
            self.pairs(items)?
        } else {
            let d = items.iter().map(|x| x.1).max().unwrap_or(0);
            // Encode list elements as pairs with a None key; unpacked below.
            (items.into_iter().map(|x| (Value::None, x.0)).collect(), d)
        };
        let op_at = self.op_at;
        let Some(top) = self.stack.last_mut() else {
            return self.err("stack underflow");
        };
        let fail = |r: &str| {
            Err(AllocError::Pickle {
                offset: op_at,
                reason: r.to_string(),
            })
        };
        match top {
            Item::Val(v, d) => {
                let nd = (*d).max(child_depth + 1);
                if nd > MAX_DEPTH {
                    return fail("nesting too deep");
                }
                *d = nd;
                match (v, as_dict) {
                    (Value::Dict(m), true) => m.extend(pairs),
                    (Value::List(l), false) => l.extend(pairs.into_iter().map(|p| p.1)),
                    (other, true) => {
                        return fail(&format!("SETITEM(S) on a {}", other.type_name()))
                    }
                    (other, false) => {
                        return fail(&format!("APPEND(S) on a {}", other.type_name()))
                    }
                }
                Ok(())
            }
            _ => fail("container expected on the stack"),
        }
    }

    fn memo_put(&mut self, idx: u32) -> Result<(), AllocError> {
        match self.stack.last() {
            Some(Item::Mark) | None => self.err("nothing to memoize"),
            Some(it) => {
                let it = it.clone();
                self.memo.insert(idx, it);
                Ok(())
            }
        }
    }

    fn memo_get(&mut self, idx: u32) -> Result<(), AllocError> {
        let Some(it) = self.memo.get(&idx) else {
            return self.err(format!("memo key {idx} not found"));
        };
        let it = it.clone();
        if let Item::Val(v, _) = &it {
            self.expansion += count_nodes(v);
            if self.expansion > MAX_EXPANSION {
                return self.err("memo references expand too much");
            }
        }
        self.stack.push(it);
        Ok(())
    }

    fn global(&self, module: &str, name: &str) -> Result<Item, AllocError> {
        match (module, name) {
            ("collections", "OrderedDict") => Ok(Item::Global(Allowed::OrderedDict)),
            ("builtins" | "__builtin__", "set" | "frozenset") => Ok(Item::Global(Allowed::Set)),
            _ => self.err(format!(
                "global {}.{} is not allowed (snapshots hold plain data; refusing to run code)",
                module.escape_debug(),
                name.escape_debug()
            )),
        }
    }

    fn long_bytes(&self, b: &[u8]) -> Result<i64, AllocError> {
        if b.is_empty() {
            return Ok(0);
        }
        if b.len() > 8 {
            return self.err("integer wider than 64 bits");
        }
        let fill = if b[b.len() - 1] & 0x80 != 0 { 0xff } else { 0 };
        let mut a = [fill; 8];
        a[..b.len()].copy_from_slice(b);
        Ok(i64::from_le_bytes(a))
    }

    fn run(mut self) -> Result<Value, AllocError> {
        loop {
            self.op_at = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    let v = self.u8()?;
                    if v > 5 {
                        return self.err(format!("unsupported pickle protocol {v}"));
                    }
                }
                0x95 => {
                    self.u64le()?;
                }
                b'.' => {
                    let (v, _) = self.pop_val()?;
                    return Ok(v);
                }
                b'(' => self.stack.push(Item::Mark),
                b'}' => self.push(Value::Dict(Vec::new())),
                b']' => self.push(Value::List(Vec::new())),
                b')' => self.push(Value::Tuple(Vec::new())),
                0x8f => self.push(Value::List(Vec::new())),
                b'N' => self.push(Value::None),
                0x88 => self.push(Value::Bool(true)),
                0x89 => self.push(Value::Bool(false)),
                b'J' => {
                    let b = self.take(4)?;
                    self.push(Value::Int(i64::from(i32::from_le_bytes([
                        b[0], b[1], b[2], b[3],
                    ]))));
                }
                b'K' => {
                    let b = self.u8()?;
                    self.push(Value::Int(i64::from(b)));
                }
                b'M' => {
                    let b = self.take(2)?;
                    self.push(Value::Int(i64::from(u16::from_le_bytes([b[0], b[1]]))));
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    let b = self.take(n)?;
                    let v = self.long_bytes(b)?;
                    self.push(Value::Int(v));
                }
                0x8b => {
                    let n = self.u32le()? as usize;
                    let b = self.take(n)?;
                    let v = self.long_bytes(b)?;
                    self.push(Value::Int(v));
                }
                b'I' | b'L' => {
                    let l = self.line()?;
                    let s = String::from_utf8_lossy(l);
                    let s = s.trim_end_matches('L');
                    let v = match s {
                        "00" => Value::Bool(false),
                        "01" => Value::Bool(true),
                        _ => match s.parse::<i64>() {
                            Ok(i) => Value::Int(i),
                            Err(_) => return self.err("bad INT literal"),
                        },
                    };
                    self.push(v);
                }
                b'G' => {
                    let b = self.take(8)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    self.push(Value::Float(f64::from_be_bytes(a)));
                }
                b'F' => {
                    let l = self.line()?;
                    match String::from_utf8_lossy(l).trim().parse::<f64>() {
                        Ok(f) => self.push(Value::Float(f)),
                        Err(_) => return self.err("bad FLOAT literal"),
                    }
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    let b = self.take(n)?;
                    let s = self.utf8(b)?;
                    self.push(Value::Str(s));
                }
                b'X' => {
                    let n = self.u32le()? as usize;
                    let b = self.take(n)?;
                    let s = self.utf8(b)?;
                    self.push(Value::Str(s));
                }
                0x8d => {
                    let n = self.len_u64()?;
                    let b = self.take(n)?;
                    let s = self.utf8(b)?;
                    self.push(Value::Str(s));
                }
                b'U' => {
                    let n = self.u8()? as usize;
                    let b = self.take(n)?.to_vec();
                    self.push(Value::Bytes(b));
                }
                b'T' => {
                    let n = self.u32le()? as usize;
                    let b = self.take(n)?.to_vec();
                    self.push(Value::Bytes(b));
                }
                b'C' => {
                    let n = self.u8()? as usize;
                    let b = self.take(n)?.to_vec();
                    self.push(Value::Bytes(b));
                }
                b'B' => {
                    let n = self.u32le()? as usize;
                    let b = self.take(n)?.to_vec();
                    self.push(Value::Bytes(b));
                }
                0x8e | 0x96 => {
                    let n = self.len_u64()?;
                    let b = self.take(n)?.to_vec();
                    self.push(Value::Bytes(b));
                }
                b'V' => {
                    let l = self.line()?;
                    let s = self.utf8(l)?;
                    self.push(Value::Str(s));
                }
                b'q' => {
                    let i = u32::from(self.u8()?);
                    self.memo_put(i)?;
                }
                b'r' => {
                    let i = self.u32le()?;
                    self.memo_put(i)?;
                }
                0x94 => {
                    let i = self.memo.len() as u32;
                    self.memo_put(i)?;
                }
                b'p' => {
                    let l = self.line()?;
                    match String::from_utf8_lossy(l).parse::<u32>() {
                        Ok(i) => self.memo_put(i)?,
                        Err(_) => return self.err("bad PUT index"),
                    }
                }
                b'h' => {
                    let i = u32::from(self.u8()?);
                    self.memo_get(i)?;
                }
                b'j' => {
                    let i = self.u32le()?;
                    self.memo_get(i)?;
                }
                b'g' => {
                    let l = self.line()?;
                    match String::from_utf8_lossy(l).parse::<u32>() {
                        Ok(i) => self.memo_get(i)?,
                        Err(_) => return self.err("bad GET index"),
                    }
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => match self.stack.last() {
                    Some(it) => {
                        let it = it.clone();
                        self.stack.push(it);
                    }
                    None => return self.err("stack underflow"),
                },
                b't' => {
                    let items = self.pop_mark()?;
                    let it = self.container(items, Value::Tuple)?;
                    self.stack.push(it);
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop_val()?);
                    }
                    items.reverse();
                    let it = self.container(items, Value::Tuple)?;
                    self.stack.push(it);
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    let it = self.container(items, Value::List)?;
                    self.stack.push(it);
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    let it = self.container(items, Value::List)?;
                    self.stack.push(it);
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    let (pairs, d) = self.pairs(items)?;
                    if d + 1 > MAX_DEPTH {
                        return self.err("nesting too deep");
                    }
                    self.stack.push(Item::Val(Value::Dict(pairs), d + 1));
                }
                b's' => {
                    let v = self.pop_val()?;
                    let k = self.pop_val()?;
                    self.extend_top(vec![k, v], true)?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    self.extend_top(items, true)?;
                }
                b'a' => {
                    let v = self.pop_val()?;
                    self.extend_top(vec![v], false)?;
                }
                b'e' | 0x90 => {
                    let items = self.pop_mark()?;
                    self.extend_top(items, false)?;
                }
                b'c' => {
                    let m = self.line()?;
                    let n = self.line()?;
                    let (m, n) = (
                        String::from_utf8_lossy(m).into_owned(),
                        String::from_utf8_lossy(n).into_owned(),
                    );
                    let g = self.global(&m, &n)?;
                    self.stack.push(g);
                }
                0x93 => {
                    let (n, _) = self.pop_val()?;
                    let (m, _) = self.pop_val()?;
                    match (m, n) {
                        (Value::Str(m), Value::Str(n)) => {
                            let g = self.global(&m, &n)?;
                            self.stack.push(g);
                        }
                        _ => return self.err("STACK_GLOBAL needs two strings"),
                    }
                }
                b'R' => {
                    let (args, d) = self.pop_val()?;
                    let f = self.pop()?;
                    let Item::Global(g) = f else {
                        return self.err("REDUCE on something that is not an allowed global");
                    };
                    let Value::Tuple(mut args) = args else {
                        return self.err("REDUCE arguments must be a tuple");
                    };
                    let arg = if args.is_empty() {
                        None
                    } else if args.len() == 1 {
                        args.pop()
                    } else {
                        return self.err("REDUCE with more than one argument");
                    };
                    let v = match (g, arg) {
                        (Allowed::OrderedDict, None) => Value::Dict(Vec::new()),
                        (Allowed::OrderedDict, Some(Value::List(items))) => {
                            let mut out = Vec::new();
                            for it in items {
                                match it {
                                    Value::Tuple(mut kv) | Value::List(mut kv) if kv.len() == 2 => {
                                        let v = kv.pop().unwrap_or(Value::None);
                                        let k = kv.pop().unwrap_or(Value::None);
                                        out.push((k, v));
                                    }
                                    _ => return self.err("OrderedDict items must be pairs"),
                                }
                            }
                            Value::Dict(out)
                        }
                        (Allowed::Set, None) => Value::List(Vec::new()),
                        (Allowed::Set, Some(Value::List(items) | Value::Tuple(items))) => {
                            Value::List(items)
                        }
                        _ => return self.err("unsupported REDUCE arguments"),
                    };
                    self.stack.push(Item::Val(v, d));
                }
                b'b' => return self.err("BUILD opcode is not allowed (object construction)"),
                b'i' => return self.err("INST opcode is not allowed (object construction)"),
                b'o' => return self.err("OBJ opcode is not allowed (object construction)"),
                0x81 => return self.err("NEWOBJ opcode is not allowed (object construction)"),
                0x92 => return self.err("NEWOBJ_EX opcode is not allowed (object construction)"),
                0x82..=0x84 => return self.err("EXT opcodes are not allowed"),
                b'P' | b'Q' => return self.err("persistent ids are not allowed"),
                0x97 | 0x98 => return self.err("out-of-band buffers are not allowed"),
                other => return self.err(format!("unknown opcode {other:#04x}")),
            }
        }
    }
}

/// Decodes a pickle of plain data. Never executes code; see the module docs
/// for what is accepted.
pub fn from_slice(data: &[u8]) -> Result<Value, AllocError> {
    Reader {
        data,
        pos: 0,
        op_at: 0,
        stack: Vec::new(),
        memo: HashMap::new(),
        expansion: 0,
    }
    .run()
}

/// Encodes `v` as a protocol-2 pickle readable by Python and by `MemoryViz.js`.
pub fn to_vec(v: &Value) -> Vec<u8> {
    let mut e = Encoder::new();
    e.value(v);
    e.finish()
}

/// Writes a protocol-2 pickle item by item, without a [`Value`] tree: the bytes [`to_vec`]
/// writes for the equivalent value (it writes through this), for writers whose value would be
/// large (a snapshot's history: a dict per entry).
pub(crate) struct Encoder {
    out: Vec<u8>,
}

/// Items per `MARK` ... `APPENDS`/`SETITEMS` batch (what Python's pickler batches).
const BATCH: usize = 1000;

impl Encoder {
    pub(crate) fn new() -> Encoder {
        Encoder { out: vec![0x80, 2] }
    }

    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.out.push(b'.');
        self.out
    }

    pub(crate) fn value(&mut self, v: &Value) {
        match v {
            Value::None => self.out.push(b'N'),
            Value::Bool(b) => self.bool(*b),
            Value::Int(i) => self.int(*i),
            Value::Float(f) => {
                self.out.push(b'G');
                self.out.extend_from_slice(&f.to_be_bytes());
            }
            Value::Str(s) => self.str(s),
            Value::Bytes(b) => {
                self.out.push(b'B');
                self.out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                self.out.extend_from_slice(b);
            }
            Value::List(xs) => self.list(xs, |e, x| e.value(x)),
            Value::Tuple(xs) => match xs.len() {
                0 => self.out.push(b')'),
                n @ 1..=3 => {
                    for x in xs {
                        self.value(x);
                    }
                    self.out.push(0x84 + n as u8);
                }
                _ => {
                    self.out.push(b'(');
                    for x in xs {
                        self.value(x);
                    }
                    self.out.push(b't');
                }
            },
            Value::Dict(items) => self.dict(items, |e, (k, v)| {
                e.value(k);
                e.value(v);
            }),
        }
    }

    pub(crate) fn bool(&mut self, b: bool) {
        self.out.push(if b { 0x88 } else { 0x89 });
    }

    pub(crate) fn int(&mut self, i: i64) {
        write_int(i, &mut self.out);
    }

    pub(crate) fn str(&mut self, s: &str) {
        self.out.push(b'X');
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
    }

    /// A list of `xs`, each written by `each`.
    pub(crate) fn list<T>(&mut self, xs: &[T], mut each: impl FnMut(&mut Self, &T)) {
        self.out.push(b']');
        for chunk in xs.chunks(BATCH) {
            self.out.push(b'(');
            for x in chunk {
                each(self, x);
            }
            self.out.push(b'e');
        }
    }

    /// A dict of `items`, each written by `each` as its key then its value.
    pub(crate) fn dict<T>(&mut self, items: &[T], mut each: impl FnMut(&mut Self, &T)) {
        self.out.push(b'}');
        for chunk in items.chunks(BATCH) {
            self.out.push(b'(');
            for x in chunk {
                each(self, x);
            }
            self.out.push(b'u');
        }
    }
}

fn write_int(i: i64, out: &mut Vec<u8>) {
    if (0..=0xff).contains(&i) {
        out.extend_from_slice(&[b'K', i as u8]);
    } else if (0..=0xffff).contains(&i) {
        out.push(b'M');
        out.extend_from_slice(&(i as u16).to_le_bytes());
    } else if i32::try_from(i).is_ok() {
        out.push(b'J');
        out.extend_from_slice(&(i as i32).to_le_bytes());
    } else {
        // Minimal two's-complement little-endian bytes, as Python's encode_long.
        let bytes = i.to_le_bytes();
        let mut n = 8;
        while n > 1 {
            let top = bytes[n - 1];
            let below_sign = bytes[n - 2] & 0x80;
            if (top == 0 && below_sign == 0) || (top == 0xff && below_sign != 0) {
                n -= 1;
            } else {
                break;
            }
        }
        out.extend_from_slice(&[0x8a, n as u8]);
        out.extend_from_slice(&bytes[..n]);
    }
}
