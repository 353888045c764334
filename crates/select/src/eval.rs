//! A parsed query made ready to run ([`Plan`]), and its expressions evaluated against
//! one record ([`Row`]).

use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use time::OffsetDateTime;

use crate::sql::{Aggregate, BinaryOp, Expr, Query, Step, Type, DEPTH_MAX};
use crate::value::{arithmetic, compare, read_number, Arith};
use crate::{Error, Value, RECORD_BYTES_MAX};

/// How many aliases deep a name may lead before the query is taken as circular.
const ALIAS_DEPTH_MAX: usize = 32;
/// The most expression nodes a query may grow to once its aliases are written out, a node
/// counting one more for each 64 bytes it holds (so at most about 6 MiB of them).
const NODES_MAX: usize = 100_000;
/// The most work one record may cost: one step per expression evaluated, per 8 bytes of
/// text it makes or name it looks up, per JSON value it makes, per JSON member passed in
/// a lookup whatever the case, per step of a LIKE. Past it the query fails, so that no
/// query can hold a thread for long over one record (a second or so).
const ROW_STEPS_MAX: u64 = 1 << 28;

/// One input record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Row {
    /// A CSV record's fields (an empty field is NULL), with the header's names under `USE`.
    Csv {
        fields: Vec<String>,
        names: Option<Arc<Names>>,
    },
    Json(serde_json::Value),
}

/// A CSV header's names, found by name in one lookup: exactly (a quoted name), or whatever
/// its case; the first of two alike is the one found.
#[derive(Debug, PartialEq)]
pub(crate) struct Names {
    names: Vec<String>,
    exact: HashMap<String, usize>,
    folded: HashMap<String, usize>,
}

impl Names {
    pub(crate) fn new(names: Vec<String>) -> Names {
        let (mut exact, mut folded) = (HashMap::new(), HashMap::new());
        for (i, name) in names.iter().enumerate() {
            exact.entry(name.clone()).or_insert(i);
            folded.entry(name.to_ascii_lowercase()).or_insert(i);
        }
        Names {
            names,
            exact,
            folded,
        }
    }

    fn find(&self, name: &str, quoted: bool) -> Option<usize> {
        match quoted {
            true => self.exact.get(name).copied(),
            false => self.folded.get(&name.to_ascii_lowercase()).copied(),
        }
    }
}

/// A column of the answer: its name (for JSON output) and its expression.
struct Column {
    name: String,
    expr: Expr,
}

/// A query's running state: its columns with aliases written out, and the aggregates so far.
pub(crate) struct Plan {
    /// `None` for `SELECT *`.
    columns: Option<Vec<Column>>,
    filter: Option<Expr>,
    limit: Option<u64>,
    from: Vec<Step>,
    /// Alias names that stand for an expression somewhere; a header may not also name them.
    used_aliases: Vec<String>,
    header_checked: bool,
    /// The aggregates by slot: what each reads, and its state.
    aggregates: Vec<Option<(Aggregate, Option<Expr>, Accumulator)>>,
    now: OffsetDateTime,
    /// The input's field delimiter, which joins a CSV record's fields when the record is
    /// one value.
    delimiter: char,
    /// The work done so far, in [`ROW_STEPS_MAX`]'s steps.
    spent: u64,
}

#[derive(Debug, Default)]
struct Accumulator {
    count: u64,
    sum: Option<Value>,
    best: Option<Value>,
}

impl Plan {
    pub(crate) fn new(query: Query, now: OffsetDateTime, delimiter: char) -> Result<Plan, Error> {
        let mut aliases: HashMap<String, Expr> = HashMap::new();
        for column in query.columns.iter().flatten() {
            if let Some(alias) = &column.alias {
                // The first column of a name is the one it stands for.
                aliases
                    .entry(alias.to_ascii_lowercase())
                    .or_insert_with(|| column.expr.clone());
            }
        }
        let mut inliner = Inliner {
            aliases: &aliases,
            used: Vec::new(),
            nodes: 0,
        };
        let columns = match query.columns {
            None => None,
            Some(projected) => {
                let mut columns = Vec::with_capacity(projected.len());
                for (i, p) in projected.into_iter().enumerate() {
                    let own = p.alias.as_ref().map(|a| a.to_ascii_lowercase());
                    let name = p.alias.clone().unwrap_or_else(|| match &p.expr {
                        Expr::Name(n) => n.clone(),
                        Expr::Column(steps) => match steps.last() {
                            Some(Step::Name(n, _)) => n.clone(),
                            _ => format!("_{}", i + 1),
                        },
                        _ => format!("_{}", i + 1),
                    });
                    let expr = inliner.inline(p.expr, own.as_deref(), 0, 0)?;
                    columns.push(Column { name, expr });
                }
                Some(columns)
            }
        };
        let filter = query
            .filter
            .map(|f| inliner.inline(f, None, 0, 0))
            .transpose()?;
        let mut slots: Vec<Option<(Aggregate, Option<Expr>, Accumulator)>> = Vec::new();
        for column in columns.iter().flatten() {
            crate::sql::walk(&column.expr, &mut |e| {
                if let Expr::Aggregate { kind, arg, slot } = e {
                    if slots.len() <= *slot {
                        slots.resize_with(slot + 1, || None);
                    }
                    slots[*slot].get_or_insert_with(|| {
                        (*kind, arg.as_deref().cloned(), Accumulator::default())
                    });
                }
            });
        }
        let aggregated = columns
            .iter()
            .flatten()
            .any(|c| crate::sql::contains_aggregate(&c.expr));
        for column in columns.iter().flatten() {
            check(&column.expr, false, aggregated)?;
        }
        if let Some(filter) = &filter {
            check(filter, true, false)?;
        }
        let mut used_aliases = inliner.used;
        used_aliases.sort();
        used_aliases.dedup();
        Ok(Plan {
            columns,
            filter,
            limit: query.limit,
            from: query.from,
            used_aliases,
            header_checked: false,
            aggregates: slots,
            now,
            delimiter,
            spent: 0,
        })
    }

    pub(crate) fn aggregates(&self) -> bool {
        !self.aggregates.is_empty()
    }

    pub(crate) fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// The work done so far, in steps as [`ROW_STEPS_MAX`] counts them.
    pub(crate) fn spent(&self) -> u64 {
        self.spent
    }

    fn context<'a>(&self, row: Option<&'a Row>, results: &'a [Value]) -> Context<'a> {
        Context {
            row,
            results,
            now: self.now,
            delimiter: self.delimiter,
            left: Cell::new(ROW_STEPS_MAX),
        }
    }

    /// The records the `FROM` path makes of an input record: JSON goes down the path, and
    /// an array found there gives one record per element. `None` when the path leads
    /// nowhere.
    pub(crate) fn from(&self, row: Row) -> Option<Vec<Row>> {
        let Row::Json(mut json) = row else {
            return Some(vec![row]);
        };
        for step in &self.from {
            json = match (step, json) {
                (Step::Name(name, quoted), serde_json::Value::Object(mut map)) => {
                    member(&mut map, name, *quoted)?
                }
                (Step::Position(n), serde_json::Value::Array(mut items)) if *n <= items.len() => {
                    items.swap_remove(n - 1)
                }
                _ => return None,
            };
        }
        Some(match json {
            serde_json::Value::Array(items) if !self.from.is_empty() => {
                items.into_iter().map(Row::Json).collect()
            }
            other => vec![Row::Json(other)],
        })
    }

    /// The answer's columns for `row`, or `None` when `WHERE` drops it or the query
    /// aggregates (then the row is counted in).
    pub(crate) fn row(&mut self, row: &Row) -> Result<Option<Vec<(String, Value)>>, Error> {
        self.check_names(row)?;
        let cx = self.context(Some(row), &[]);
        if let Some(filter) = &self.filter {
            if cx.eval(filter)?.truth()? != Some(true) {
                self.spent += cx.spent();
                return Ok(None);
            }
        }
        let answer = if self.aggregates() {
            for (kind, arg, acc) in self.aggregates.iter_mut().flatten() {
                let value = match arg {
                    Some(arg) => cx.eval(arg)?,
                    None => Value::Int(1),
                };
                acc.add(*kind, value)?;
            }
            None
        } else {
            Some(match &self.columns {
                None => whole(row),
                Some(columns) => bounded(columns, &cx)?,
            })
        };
        // A query that fails ends, so only the work of records that did not is counted.
        self.spent += cx.spent();
        Ok(answer)
    }

    /// The aggregates' one record, once every row is in.
    pub(crate) fn aggregated(&self) -> Result<Vec<(String, Value)>, Error> {
        let results: Vec<Value> = self
            .aggregates
            .iter()
            .map(|slot| match slot {
                Some((kind, _, acc)) => acc.result(*kind),
                None => Value::Null,
            })
            .collect();
        let cx = self.context(None, &results);
        bounded(self.columns.as_deref().unwrap_or_default(), &cx)
    }

    /// A record may not name a field as an alias the query uses does: a CSV header (read
    /// once), a JSON record's members (each record; the aliases are few and sorted).
    fn check_names(&mut self, row: &Row) -> Result<(), Error> {
        if self.used_aliases.is_empty() {
            return Ok(());
        }
        let clash = match row {
            Row::Csv {
                names: Some(names), ..
            } if !self.header_checked => {
                self.header_checked = true;
                names.names.iter().find(|n| self.uses_alias(n))
            }
            Row::Json(serde_json::Value::Object(members)) => {
                members.keys().find(|n| self.uses_alias(n))
            }
            _ => None,
        };
        match clash {
            Some(both) => Err(Error::Schema(format!(
                "multiple definition of column {{{both}}} as schema-column and alias"
            ))),
            None => Ok(()),
        }
    }

    fn uses_alias(&self, name: &str) -> bool {
        self.used_aliases
            .binary_search(&name.to_ascii_lowercase())
            .is_ok()
    }
}

/// The columns' values for one answer record, refused once they pass
/// [`RECORD_BYTES_MAX`] (before the rest are computed).
fn bounded(columns: &[Column], cx: &Context) -> Result<Vec<(String, Value)>, Error> {
    let mut size = 0;
    let mut values = Vec::with_capacity(columns.len());
    for column in columns {
        let value = cx.eval(&column.expr)?;
        size += value.size() + column.name.len();
        if size > RECORD_BYTES_MAX {
            return Err(Error::RecordTooLarge);
        }
        values.push((column.name.clone(), value));
    }
    Ok(values)
}

/// `SELECT *`: the record as it came.
fn whole(row: &Row) -> Vec<(String, Value)> {
    match row {
        Row::Csv { fields, names } => fields
            .iter()
            .enumerate()
            .map(|(i, field)| {
                let name = names
                    .as_ref()
                    .and_then(|n| n.names.get(i).cloned())
                    .unwrap_or_else(|| format!("_{}", i + 1));
                (name, field_value(field))
            })
            .collect(),
        Row::Json(serde_json::Value::Object(map)) => map
            .iter()
            .map(|(k, v)| (k.clone(), Value::from_json(v)))
            .collect(),
        Row::Json(other) => vec![("_1".into(), Value::from_json(other))],
    }
}

fn field_value(field: &str) -> Value {
    if field.is_empty() {
        Value::Null
    } else {
        Value::Str(field.to_owned())
    }
}

/// A JSON object's member: by its exact name, or, unquoted, whatever its case.
fn member(
    map: &mut serde_json::Map<String, serde_json::Value>,
    name: &str,
    quoted: bool,
) -> Option<serde_json::Value> {
    if let Some(v) = map.remove(name) {
        return Some(v);
    }
    if quoted {
        return None;
    }
    let key = map.keys().find(|k| k.eq_ignore_ascii_case(name))?.clone();
    map.remove(&key)
}

/// What a path's step holds besides its name's text.
const STEP_BYTES: usize = std::mem::size_of::<Step>();

/// The bytes an expression node holds itself (a literal's text, a name's, a path's steps,
/// a function's name), which copying it copies.
fn held_bytes(expr: &Expr) -> usize {
    match expr {
        Expr::Literal(Value::Str(text)) | Expr::Name(text) | Expr::Call(text, _) => text.len(),
        Expr::Column(steps) => steps
            .iter()
            .map(|step| match step {
                Step::Name(name, _) => STEP_BYTES + name.len(),
                Step::Position(_) | Step::Index(_) => STEP_BYTES,
            })
            .sum(),
        _ => 0,
    }
}

/// Writes projection aliases out where they are named.
struct Inliner<'a> {
    aliases: &'a HashMap<String, Expr>,
    used: Vec<String>,
    nodes: usize,
}

impl Inliner<'_> {
    /// `expr` with every name of an alias (but the alias `own` being defined) replaced by
    /// its expression.
    /// `depth` counts the aliases gone through, `level` how deep `expr` sits in the result,
    /// which stays within [`DEPTH_MAX`] as the parser keeps every query.
    fn inline(
        &mut self,
        expr: Expr,
        own: Option<&str>,
        depth: usize,
        level: usize,
    ) -> Result<Expr, Error> {
        self.nodes += 1 + held_bytes(&expr) / 64;
        if self.nodes > NODES_MAX {
            return Err(Error::Parse(format!(
                "the query grows past {NODES_MAX} terms once its aliases are written out"
            )));
        }
        if level > DEPTH_MAX {
            return Err(Error::Parse(format!(
                "the query nests deeper than {DEPTH_MAX} once its aliases are written out"
            )));
        }
        let mut go = |e: Box<Expr>| -> Result<Box<Expr>, Error> {
            Ok(Box::new(self.inline(*e, own, depth, level + 1)?))
        };
        Ok(match expr {
            Expr::Name(name) => {
                let lower = name.to_ascii_lowercase();
                let found = self
                    .aliases
                    .get_key_value(&lower)
                    .filter(|(alias, _)| Some(alias.as_str()) != own);
                match found {
                    None => Expr::Name(name),
                    Some((alias, aliased)) => {
                        if depth >= ALIAS_DEPTH_MAX {
                            return Err(Error::Schema(
                                "number of calls exceed maximum size, probably a cyclic reference to alias".into(),
                            ));
                        }
                        self.used.push(alias.clone());
                        let (alias, aliased) = (alias.clone(), aliased.clone());
                        self.inline(aliased, Some(&alias), depth + 1, level)?
                    }
                }
            }
            Expr::Literal(_) | Expr::Column(_) | Expr::Record => expr,
            Expr::Not(e) => Expr::Not(go(e)?),
            Expr::All(terms) => Expr::All(
                terms
                    .into_iter()
                    .map(|e| go(Box::new(e)).map(|e| *e))
                    .collect::<Result<_, _>>()?,
            ),
            Expr::Any(terms) => Expr::Any(
                terms
                    .into_iter()
                    .map(|e| go(Box::new(e)).map(|e| *e))
                    .collect::<Result<_, _>>()?,
            ),
            Expr::Negate(e) => Expr::Negate(go(e)?),
            Expr::IsNull(e, negated) => Expr::IsNull(go(e)?, negated),
            Expr::Cast(e, ty) => Expr::Cast(go(e)?, ty),
            Expr::Binary(op, a, b) => Expr::Binary(op, go(a)?, go(b)?),
            Expr::Like {
                value,
                pattern,
                escape,
                negated,
            } => Expr::Like {
                value: go(value)?,
                pattern: go(pattern)?,
                escape: escape.map(&mut go).transpose()?,
                negated,
            },
            Expr::Between {
                value,
                low,
                high,
                negated,
            } => Expr::Between {
                value: go(value)?,
                low: go(low)?,
                high: go(high)?,
                negated,
            },
            Expr::In {
                value,
                list,
                negated,
            } => Expr::In {
                value: go(value)?,
                list: list
                    .into_iter()
                    .map(|e| go(Box::new(e)).map(|e| *e))
                    .collect::<Result<_, _>>()?,
                negated,
            },
            Expr::Case {
                operand,
                whens,
                otherwise,
            } => Expr::Case {
                operand: operand.map(&mut go).transpose()?,
                whens: whens
                    .into_iter()
                    .map(|(w, t)| Ok((*go(Box::new(w))?, *go(Box::new(t))?)))
                    .collect::<Result<_, Error>>()?,
                otherwise: otherwise.map(&mut go).transpose()?,
            },
            Expr::Call(name, args) => Expr::Call(
                name,
                args.into_iter()
                    .map(|e| go(Box::new(e)).map(|e| *e))
                    .collect::<Result<_, _>>()?,
            ),
            Expr::Aggregate { kind, arg, slot } => Expr::Aggregate {
                kind,
                arg: arg.map(&mut go).transpose()?,
                slot,
            },
        })
    }
}

impl Accumulator {
    fn add(&mut self, kind: Aggregate, value: Value) -> Result<(), Error> {
        if value.is_null() {
            return Ok(());
        }
        self.count += 1;
        match kind {
            Aggregate::Count => {}
            Aggregate::Sum | Aggregate::Avg => {
                let Some(number) = value.number() else {
                    return Err(Error::Eval(format!(
                        "{} is not a number to add up",
                        value.shown()
                    )));
                };
                self.sum = Some(match self.sum.take() {
                    None => number,
                    Some(sum) => arithmetic(Arith::Add, &sum, &number)?,
                });
            }
            Aggregate::Min | Aggregate::Max => {
                let value = value.number().unwrap_or(value);
                let replace = match &self.best {
                    None => true,
                    Some(best) => {
                        let order = compare(&value, best)?;
                        if kind == Aggregate::Min {
                            order == Some(Ordering::Less)
                        } else {
                            order == Some(Ordering::Greater)
                        }
                    }
                };
                if replace {
                    self.best = Some(value);
                }
            }
        }
        Ok(())
    }

    fn result(&self, kind: Aggregate) -> Value {
        match kind {
            Aggregate::Count => Value::Int(self.count as i64),
            Aggregate::Sum => self.sum.clone().unwrap_or(Value::Null),
            Aggregate::Min | Aggregate::Max => self.best.clone().unwrap_or(Value::Null),
            Aggregate::Avg => match self.sum.as_ref().and_then(Value::float) {
                Some(sum) if self.count > 0 => Value::Float(sum / self.count as f64),
                _ => Value::Null,
            },
        }
    }
}

/// A step of a path, borrowed.
#[derive(Clone, Copy)]
enum Key<'a> {
    Position(usize),
    Name(&'a str, bool),
    Index(Option<usize>),
}

impl<'a> From<&'a Step> for Key<'a> {
    fn from(step: &'a Step) -> Key<'a> {
        match step {
            Step::Position(n) => Key::Position(*n),
            Step::Name(name, quoted) => Key::Name(name, *quoted),
            Step::Index(n) => Key::Index(*n),
        }
    }
}

/// What an expression is evaluated against: a record, or the aggregates' results.
struct Context<'a> {
    row: Option<&'a Row>,
    results: &'a [Value],
    now: OffsetDateTime,
    /// Joins a CSV record's fields when the record is one value.
    delimiter: char,
    /// The work this record may still cost, in [`ROW_STEPS_MAX`]'s steps.
    left: Cell<u64>,
}

impl Context<'_> {
    /// The work done in this context so far.
    fn spent(&self) -> u64 {
        ROW_STEPS_MAX - self.left.get()
    }

    fn spend(&self, steps: u64) -> Result<(), Error> {
        match self.left.get().checked_sub(steps) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(Error::Eval(format!(
                "the query takes more than {ROW_STEPS_MAX} steps over one record"
            ))),
        }
    }

    fn eval(&self, expr: &Expr) -> Result<Value, Error> {
        self.spend(1)?;
        let value = self.value(expr)?;
        self.spend(weight(&value))?;
        Ok(value)
    }

    fn value(&self, expr: &Expr) -> Result<Value, Error> {
        Ok(match expr {
            Expr::Literal(v) => v.clone(),
            Expr::Name(name) => self.field(Key::Name(name, false), &[])?,
            Expr::Column(steps) => match steps.split_first() {
                Some((first, rest)) => self.field(Key::from(first), rest)?,
                None => return Err(Error::Parse("an empty column path".into())),
            },
            Expr::Record => match self.row {
                Some(Row::Json(json)) => Value::from_json(json),
                Some(Row::Csv { fields, .. }) => {
                    Value::Str(fields.join(self.delimiter.encode_utf8(&mut [0; 4])))
                }
                None => Value::Null,
            },
            Expr::Not(e) => match self.eval(e)?.truth()? {
                Some(b) => Value::Bool(!b),
                None => Value::Null,
            },
            Expr::All(terms) => self.logic(terms, false)?,
            Expr::Any(terms) => self.logic(terms, true)?,
            Expr::Negate(e) => arithmetic(Arith::Sub, &Value::Int(0), &self.eval(e)?)?,
            Expr::Binary(op, a, b) => self.binary(*op, a, b)?,
            Expr::IsNull(e, negated) => Value::Bool(self.eval(e)?.is_null() != *negated),
            Expr::Like {
                value,
                pattern,
                escape,
                negated,
            } => {
                let value = self.eval(value)?;
                let pattern = self.eval(pattern)?;
                let escape = escape.as_ref().map(|e| self.eval(e)).transpose()?;
                if value.is_null()
                    || pattern.is_null()
                    || escape.as_ref().is_some_and(Value::is_null)
                {
                    return Ok(Value::Null);
                }
                let escape = match escape.map(|e| e.text()) {
                    None => None,
                    Some(e) => {
                        let mut chars = e.chars();
                        match (chars.next(), chars.next()) {
                            (Some(c), None) => Some(c),
                            _ => {
                                return Err(Error::Eval(format!(
                                    "the ESCAPE of LIKE is one character, not '{e}'"
                                )))
                            }
                        }
                    }
                };
                let (matched, steps) = like(&value.text(), &pattern.text(), escape)?;
                self.spend(steps)?;
                Value::Bool(matched != *negated)
            }
            Expr::Between {
                value,
                low,
                high,
                negated,
            } => {
                let value = self.eval(value)?;
                let above = compare(&value, &self.eval(low)?)?.map(|o| o != Ordering::Less);
                let below = compare(&value, &self.eval(high)?)?.map(|o| o != Ordering::Greater);
                match and(above, below) {
                    Some(inside) => Value::Bool(inside != *negated),
                    None => Value::Null,
                }
            }
            Expr::In {
                value,
                list,
                negated,
            } => {
                let value = self.eval(value)?;
                let mut found = Some(false);
                for item in list {
                    match compare(&value, &self.eval(item)?)? {
                        Some(Ordering::Equal) => {
                            found = Some(true);
                            break;
                        }
                        Some(_) => {}
                        None => found = None,
                    }
                }
                match found {
                    Some(found) => Value::Bool(found != *negated),
                    None => Value::Null,
                }
            }
            Expr::Case {
                operand,
                whens,
                otherwise,
            } => {
                let operand = operand.as_ref().map(|o| self.eval(o)).transpose()?;
                for (when, then) in whens {
                    let when = self.eval(when)?;
                    let hit = match &operand {
                        Some(operand) => compare(operand, &when)? == Some(Ordering::Equal),
                        None => when.truth()? == Some(true),
                    };
                    if hit {
                        return self.eval(then);
                    }
                }
                match otherwise {
                    Some(e) => self.eval(e)?,
                    None => Value::Null,
                }
            }
            Expr::Cast(e, ty) => cast(self.eval(e)?, *ty)?,
            // Lazily: the first value that is not NULL, the rest never evaluated.
            Expr::Call(name, args) if name == "coalesce" => {
                for arg in args {
                    let value = self.eval(arg)?;
                    if !value.is_null() {
                        return Ok(value);
                    }
                }
                Value::Null
            }
            Expr::Call(name, args) => {
                let args = args
                    .iter()
                    .map(|a| self.eval(a))
                    .collect::<Result<Vec<_>, _>>()?;
                call(name, args, self.now)?
            }
            Expr::Aggregate { slot, .. } => match self.row {
                None => self.results.get(*slot).cloned().unwrap_or(Value::Null),
                Some(_) => {
                    return Err(Error::Parse(
                        "an aggregate stands beside plain columns".into(),
                    ))
                }
            },
        })
    }

    /// AND (`decisive` false) or OR (`decisive` true) of `terms` in SQL's three-valued
    /// logic: the first decisive term answers; else any NULL makes NULL.
    fn logic(&self, terms: &[Expr], decisive: bool) -> Result<Value, Error> {
        let mut unknown = false;
        for term in terms {
            match self.eval(term)?.truth()? {
                Some(b) if b == decisive => return Ok(Value::Bool(decisive)),
                Some(_) => {}
                None => unknown = true,
            }
        }
        Ok(if unknown {
            Value::Null
        } else {
            Value::Bool(!decisive)
        })
    }

    fn binary(&self, op: BinaryOp, a: &Expr, b: &Expr) -> Result<Value, Error> {
        let (x, y) = (self.eval(a)?, self.eval(b)?);
        let arith = |op| arithmetic(op, &x, &y);
        let ordered = |test: fn(Ordering) -> bool| -> Result<Value, Error> {
            Ok(match compare(&x, &y)? {
                Some(order) => Value::Bool(test(order)),
                None => Value::Null,
            })
        };
        match op {
            BinaryOp::Add => arith(Arith::Add),
            BinaryOp::Sub => arith(Arith::Sub),
            BinaryOp::Mul => arith(Arith::Mul),
            BinaryOp::Div => arith(Arith::Div),
            BinaryOp::Mod => arith(Arith::Mod),
            BinaryOp::Concat => {
                if x.is_null() || y.is_null() {
                    return Ok(Value::Null);
                }
                let joined = x.text() + &y.text();
                if joined.len() > RECORD_BYTES_MAX {
                    return Err(Error::RecordTooLarge);
                }
                Ok(Value::Str(joined))
            }
            BinaryOp::Eq => ordered(|o| o == Ordering::Equal),
            BinaryOp::Ne => ordered(|o| o != Ordering::Equal),
            BinaryOp::Lt => ordered(|o| o == Ordering::Less),
            BinaryOp::Le => ordered(|o| o != Ordering::Greater),
            BinaryOp::Gt => ordered(|o| o == Ordering::Greater),
            BinaryOp::Ge => ordered(|o| o != Ordering::Less),
        }
    }

    /// A field of the record by its path, `first` and the steps after it; a lookup by name
    /// costs a step per 8 bytes of the name, a JSON member sought whatever its case a step
    /// per member passed.
    fn field(&self, first: Key, rest: &[Step]) -> Result<Value, Error> {
        let Some(row) = self.row else {
            return Err(Error::Parse(
                "a column stands beside aggregates outside of them".into(),
            ));
        };
        let path = std::iter::once(first).chain(rest.iter().map(Key::from));
        for key in path.clone() {
            if let Key::Name(name, _) = key {
                self.spend(name.len() as u64 / 8)?;
            }
        }
        match row {
            Row::Csv { fields, names } => {
                let value = match first {
                    Key::Position(n) => fields.get(n - 1).map_or(Value::Null, |f| field_value(f)),
                    Key::Name(name, quoted) => {
                        match names.as_ref().and_then(|names| names.find(name, quoted)) {
                            Some(i) => fields.get(i).map_or(Value::Null, |f| field_value(f)),
                            None if quoted => Value::Str(name.to_owned()),
                            None => {
                                return Err(Error::Schema(format!(
                                    "alias {{{name}}} or column not exist in schema"
                                )))
                            }
                        }
                    }
                    Key::Index(_) => Value::Null,
                };
                Ok(if rest.is_empty() { value } else { Value::Null })
            }
            Row::Json(json) => {
                // Ceph names the record `_1` in JSON: `_1.a` is the record's `a`.
                let (first, rest) = match (first, rest.split_first()) {
                    (Key::Position(1), Some((second, rest))) => (Key::from(second), rest),
                    _ => (first, rest),
                };
                let alone = rest.is_empty();
                let mut at = json;
                for (i, key) in std::iter::once(first)
                    .chain(rest.iter().map(Key::from))
                    .enumerate()
                {
                    let next = match (key, at) {
                        (Key::Name(name, quoted), serde_json::Value::Object(map)) => {
                            match map.get(name) {
                                Some(found) => Some(found),
                                None if quoted => None,
                                None => {
                                    self.spend(map.len() as u64)?;
                                    map.iter()
                                        .find(|(k, _)| k.eq_ignore_ascii_case(name))
                                        .map(|(_, v)| v)
                                }
                            }
                        }
                        (Key::Index(Some(n)), serde_json::Value::Array(items)) => items.get(n),
                        (Key::Position(n), serde_json::Value::Array(items)) => items.get(n - 1),
                        _ => None,
                    };
                    match next {
                        Some(next) => at = next,
                        None => {
                            return Ok(match key {
                                Key::Name(name, true) if i == 0 && alone => {
                                    Value::Str(name.to_owned())
                                }
                                _ => Value::Null,
                            })
                        }
                    }
                }
                Ok(Value::from_json(at))
            }
        }
    }
}

/// What making `value` costs in steps: one per 8 bytes of its text, one per JSON value
/// and 8 bytes of its text. Every function reads its arguments in time linear in their
/// size (TRIM's characters are searched, not scanned), so charging each value as it is
/// made charges the work done with it.
fn weight(value: &Value) -> u64 {
    fn bytes(json: &serde_json::Value) -> usize {
        64 + match json {
            serde_json::Value::String(s) => s.len(),
            serde_json::Value::Array(items) => items.iter().map(bytes).sum(),
            serde_json::Value::Object(members) => {
                members.iter().map(|(k, v)| k.len() + bytes(v)).sum()
            }
            _ => 0,
        }
    }
    let size = match value {
        Value::Str(s) => s.len(),
        Value::Json(json) => bytes(json),
        _ => 0,
    };
    (size / 8) as u64
}

fn and(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

fn cast(value: Value, ty: Type) -> Result<Value, Error> {
    if value.is_null() {
        return Ok(Value::Null);
    }
    let failed = || Error::Eval(format!("{} cannot be cast to {ty:?}", value.shown()));
    Ok(match ty {
        Type::Int => match &value {
            Value::Bool(b) => Value::Int(i64::from(*b)),
            Value::Timestamp(_) | Value::Json(_) => return Err(failed()),
            _ => match value.number().ok_or_else(failed)? {
                Value::Float(f) if f.is_finite() => Value::Int(f.trunc() as i64),
                Value::Int(n) => Value::Int(n),
                _ => return Err(failed()),
            },
        },
        Type::Float | Type::Decimal => match &value {
            Value::Bool(b) => Value::Float(f64::from(u8::from(*b))),
            _ => Value::Float(value.float().ok_or_else(failed)?),
        },
        Type::String => Value::Str(value.text()),
        Type::Bool => match &value {
            Value::Bool(_) => value,
            Value::Int(n) => Value::Bool(*n != 0),
            Value::Float(f) => Value::Bool(*f != 0.0),
            Value::Str(s) => match read_number(s) {
                Some(n) => cast(n, Type::Bool)?,
                None => Value::Bool(value.truth().map_err(|_| failed())?.ok_or_else(failed)?),
            },
            _ => return Err(failed()),
        },
        Type::Timestamp => match &value {
            Value::Timestamp(_) => value,
            Value::Str(s) => Value::Timestamp(crate::time::parse(s)?),
            _ => return Err(failed()),
        },
    })
}

/// The scalar functions.
/// How many arguments each scalar function takes (the date functions count their part);
/// `None` for a name that is no function.
fn arity(name: &str) -> Option<std::ops::RangeInclusive<usize>> {
    Some(match name {
        "utcnow" => 0..=0,
        "int" | "integer" | "float" | "string" | "lower" | "upper" | "char_length"
        | "character_length" | "to_timestamp" => 1..=1,
        "nullif" | "to_string" | "extract" => 2..=2,
        "substring" | "trim" => 2..=3,
        "date_add" | "date_diff" => 3..=3,
        "coalesce" => 1..=usize::MAX,
        _ => return None,
    })
}

/// The date parts `EXTRACT` reads, and those `DATE_ADD` and `DATE_DIFF` count in.
const EXTRACT_PARTS: [&str; 8] = [
    "year",
    "month",
    "day",
    "hour",
    "minute",
    "second",
    "timezone_hour",
    "timezone_minute",
];

/// Refuses, before any record is read, what no record could make right: a function that
/// does not exist or is given the wrong number of arguments, a date part that is none, an
/// aggregate in `WHERE`, a column beside aggregates outside of them.
fn check(expr: &Expr, filter: bool, aggregated: bool) -> Result<(), Error> {
    let mut found = Ok(());
    crate::sql::walk(expr, &mut |e| {
        if found.is_err() {
            return;
        }
        found = match e {
            Expr::Call(name, args) => match arity(name) {
                None => Err(Error::Parse(format!("no function {name}()"))),
                Some(n) if !n.contains(&args.len()) => Err(Error::Parse(format!(
                    "{name}() takes {} arguments, not {}",
                    if n.end() == &usize::MAX {
                        format!("{} or more", n.start())
                    } else if n.start() == n.end() {
                        n.start().to_string()
                    } else {
                        format!("{} to {}", n.start(), n.end())
                    },
                    args.len()
                ))),
                Some(_) => match (name.as_str(), args.first()) {
                    (
                        "extract" | "date_add" | "date_diff",
                        Some(Expr::Literal(Value::Str(part))),
                    ) if !EXTRACT_PARTS[..if name == "extract" { 8 } else { 6 }]
                        .contains(&part.as_str()) =>
                    {
                        Err(Error::Parse(format!(
                            "{name}() does not take the part {part}"
                        )))
                    }
                    _ => Ok(()),
                },
            },
            Expr::Aggregate { .. } if filter => {
                Err(Error::Parse("WHERE cannot hold an aggregate".into()))
            }
            _ => Ok(()),
        };
    });
    found?;
    if aggregated && reads_outside_aggregates(expr) {
        return Err(Error::Parse(
            "a column of an aggregating query must be inside an aggregate".into(),
        ));
    }
    Ok(())
}

/// Whether `expr` reads the record anywhere but inside an aggregate.
fn reads_outside_aggregates(expr: &Expr) -> bool {
    match expr {
        Expr::Aggregate { .. } => false,
        Expr::Column(_) | Expr::Name(_) | Expr::Record => true,
        _ => crate::sql::children(expr)
            .into_iter()
            .any(reads_outside_aggregates),
    }
}

fn call(name: &str, args: Vec<Value>, now: OffsetDateTime) -> Result<Value, Error> {
    let expected = arity(name).ok_or_else(|| Error::Eval(format!("no function {name}()")))?;
    assert!(
        expected.contains(&args.len()),
        "{name}() is given as many arguments as it takes: the plan checked"
    );
    let text = |v: &Value| -> Option<String> { (!v.is_null()).then(|| v.text()) };
    Ok(match name {
        "int" | "integer" => cast(args[0].clone(), Type::Int)?,
        "float" => cast(args[0].clone(), Type::Float)?,
        "string" => cast(args[0].clone(), Type::String)?,
        "nullif" => match compare(&args[0], &args[1])? {
            Some(Ordering::Equal) => Value::Null,
            _ if args[0].is_null() && args[1].is_null() => Value::Null,
            _ => args[0].clone(),
        },
        "lower" | "upper" => match text(&args[0]) {
            None => Value::Null,
            Some(t) if name == "lower" => Value::Str(t.to_lowercase()),
            Some(t) => Value::Str(t.to_uppercase()),
        },
        "char_length" | "character_length" => match text(&args[0]) {
            None => Value::Null,
            Some(t) => Value::Int(t.chars().count() as i64),
        },
        "substring" => {
            let Some(t) = text(&args[0]) else {
                return Ok(Value::Null);
            };
            if args[1..].iter().any(Value::is_null) {
                return Ok(Value::Null);
            }
            let whole = |v: &Value| match v.number() {
                Some(Value::Int(n)) => Ok(n),
                Some(Value::Float(f)) => Ok(f as i64),
                _ => Err(Error::Eval(format!(
                    "substring() takes a position, not {}",
                    v.shown()
                ))),
            };
            let start = whole(&args[1])?;
            let end = match args.get(2) {
                Some(len) => start.saturating_add(whole(len)?.max(0)),
                None => i64::MAX,
            };
            let from = start.max(1);
            Value::Str(
                t.chars()
                    .enumerate()
                    .filter(|(i, _)| {
                        let position = *i as i64 + 1;
                        position >= from && position < end
                    })
                    .map(|(_, c)| c)
                    .collect(),
            )
        }
        "trim" => {
            let Some(t) = text(&args[1]) else {
                return Ok(Value::Null);
            };
            let mut chars: Vec<char> = match args.get(2) {
                Some(v) => v.text().chars().collect(),
                None => vec![' '],
            };
            chars.sort_unstable();
            chars.dedup();
            let side = args[0].text();
            let cut = |c: char| chars.binary_search(&c).is_ok();
            Value::Str(match side.as_str() {
                "leading" => t.trim_start_matches(cut).to_owned(),
                "trailing" => t.trim_end_matches(cut).to_owned(),
                _ => t.trim_matches(cut).to_owned(),
            })
        }
        "utcnow" => Value::Timestamp(now),
        "to_timestamp" => cast(args[0].clone(), Type::Timestamp)?,
        "to_string" => match (&args[0], text(&args[1])) {
            (Value::Null, _) | (_, None) => Value::Null,
            (Value::Timestamp(t), Some(pattern)) => Value::Str(crate::time::format(t, &pattern)?),
            (other, _) => {
                return Err(Error::Eval(format!(
                    "to_string() takes a timestamp, not {}",
                    other.shown()
                )))
            }
        },
        "extract" | "date_add" | "date_diff" => crate::time::call(name, &args)?,
        _ => return Err(Error::Parse(format!("no function {name}()"))),
    })
}

/// The longest LIKE pattern, in characters: matching costs text × pattern at worst.
const LIKE_PATTERN_MAX: usize = 1024;
/// The most steps one LIKE may take before it is refused, so that no value and pattern can
/// hold the query for long (tens of milliseconds).
const LIKE_STEPS_MAX: u64 = 1 << 26;

/// SQL's LIKE, as S3 reads it: `%` any run, `_` any one character, `escape` makes the next
/// character plain; every other character (`[` included) is itself. Answers whether `text`
/// matches, and the steps that took.
fn like(text: &str, pattern: &str, escape: Option<char>) -> Result<(bool, u64), Error> {
    #[derive(Debug, PartialEq)]
    enum Part {
        Any,
        One,
        Char(char),
    }
    if pattern.chars().count() > LIKE_PATTERN_MAX {
        return Err(Error::Eval(format!(
            "a LIKE pattern is at most {LIKE_PATTERN_MAX} characters"
        )));
    }
    let mut parts = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        parts.push(if Some(c) == escape {
            match chars.next() {
                Some(next) => Part::Char(next),
                None => {
                    return Err(Error::Eval(format!(
                        "the LIKE pattern {} ends with its escape",
                        Value::Str(pattern.into()).shown()
                    )))
                }
            }
        } else {
            match c {
                '%' => Part::Any,
                '_' => Part::One,
                other => Part::Char(other),
            }
        });
    }
    // The classic walk with one backtrack point, at the last `%`.
    let text: Vec<char> = text.chars().collect();
    let (mut t, mut p) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    let mut steps = 0u64;
    while t < text.len() {
        steps += 1;
        if steps > LIKE_STEPS_MAX {
            return Err(Error::Eval(
                "LIKE takes too long over a value this long: shorten the pattern's runs between %"
                    .into(),
            ));
        }
        match parts.get(p) {
            Some(Part::Any) => {
                star = Some((p, t));
                p += 1;
            }
            Some(Part::One) => {
                t += 1;
                p += 1;
            }
            Some(Part::Char(c)) if *c == text[t] => {
                t += 1;
                p += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return Ok((false, steps)),
            },
        }
    }
    Ok((parts[p..].iter().all(|part| *part == Part::Any), steps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_matches_wildcards_and_escapes_and_brackets_are_plain() {
        let yes = |t, p, e| assert!(like(t, p, e).expect("a pattern").0, "{t} like {p}");
        let no = |t, p, e| assert!(!like(t, p, e).expect("a pattern").0, "{t} not like {p}");
        yes("cbcdavwxyz", "%yz", None);
        yes("cbcdavwxyz", "c%z", None);
        yes("[ERROR] disk", "%[ERROR]%", None);
        no("E", "%[ERROR]%", None);
        yes("a[", "%[", None);
        yes("x3", "_3", None);
        no("x33", "_3", None);
        yes("aeio_", "%aeio$_", Some('$'));
        no("aeiox", "%aeio$_", Some('$'));
        yes("_ar", "%_ar", Some('%'));
        no("xar", "%_ar", Some('%'));
        yes("", "%", None);
        no("", "_", None);
        yes("aaa", "%a%a%", None);
        assert!(like("x", "a$", Some('$')).is_err());
        assert!(like("x", &"a".repeat(LIKE_PATTERN_MAX + 1), None).is_err());
        let long = "a".repeat(1 << 20);
        let costly = format!("%{}b", "a".repeat(1000));
        assert!(like(&long, &costly, None).is_err());
    }

    #[test]
    fn cast_reads_text_and_refuses_what_is_not_a_number() {
        assert_eq!(cast(Value::Str("05".into()), Type::Int), Ok(Value::Int(5)));
        assert_eq!(cast(Value::Str("2.7".into()), Type::Int), Ok(Value::Int(2)));
        assert_eq!(cast(Value::Int(3), Type::Bool), Ok(Value::Bool(true)));
        assert_eq!(cast(Value::Null, Type::Int), Ok(Value::Null));
        assert!(cast(Value::Str("abc".into()), Type::Int).is_err());
    }
}
