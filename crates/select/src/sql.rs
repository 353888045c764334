//! The SQL of S3 Select, read into a [`Query`]: one `SELECT` over `S3Object`, with a
//! projection, an optional `WHERE` and an optional `LIMIT`. Keywords and function names
//! are read whatever their case; names in double quotes keep theirs.
//!
//! A recursive-descent parser over tokens; precedence, loosest first: `OR`, `AND`, `NOT`,
//! comparison (`=`, `<>`, `LIKE`, `BETWEEN`, `IN`, `IS`), `||`, `+ -`, `* / %`, unary minus.

use crate::{Error, Value};

/// The longest query read, as S3's own limit (256 KiB).
pub const QUERY_BYTES_MAX: usize = 256 * 1024;
/// How deep expressions may nest before the query is refused, so that no query can
/// exhaust the stack (reading, evaluating or dropping it).
pub(crate) const DEPTH_MAX: usize = 100;
/// The longest path: JSON is read nested at most 128 deep, so a longer one finds nothing.
const PATH_STEPS_MAX: usize = 128;

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Text(String),
    Number(String),
    Symbol(&'static str),
}

const SYMBOLS: [&str; 20] = [
    "<>", "!=", "<=", ">=", "||", "(", ")", ",", ".", "*", "+", "-", "/", "%", "=", "<", ">", "[",
    "]", ";",
];

fn tokens(text: &str) -> Result<Vec<Token>, Error> {
    if text.len() > QUERY_BYTES_MAX {
        return Err(Error::Parse(format!(
            "the query is longer than {QUERY_BYTES_MAX} bytes"
        )));
    }
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c.is_whitespace() {
            rest = &rest[c.len_utf8()..];
        } else if c == '\'' || c == '"' {
            let (body, after) = quoted(&rest[1..], c)?;
            out.push(if c == '\'' {
                Token::Text(body)
            } else {
                Token::Quoted(body)
            });
            rest = after;
        } else if c.is_ascii_digit() {
            let end = number_end(rest);
            out.push(Token::Number(rest[..end].to_owned()));
            rest = &rest[end..];
        } else if c.is_alphabetic() || c == '_' {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            out.push(Token::Word(rest[..end].to_owned()));
            rest = &rest[end..];
        } else if let Some(symbol) = SYMBOLS.iter().find(|s| rest.starts_with(**s)) {
            out.push(Token::Symbol(symbol));
            rest = &rest[symbol.len()..];
        } else {
            return Err(Error::Parse(format!("unexpected character {c:?}")));
        }
    }
    Ok(out)
}

/// Where the number that starts `text` ends: digits, a fraction, an exponent (`1.5e-3`).
fn number_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    let digits = |from: usize| {
        from + bytes[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let mut end = digits(0);
    if bytes.get(end) == Some(&b'.') {
        end = digits(end + 1);
    }
    if matches!(bytes.get(end), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(bytes.get(end + 1), Some(b'+' | b'-')));
        let exponent = digits(end + 1 + sign);
        if exponent > end + 1 + sign {
            end = exponent;
        }
    }
    end
}

/// The text of a quoted token up to its closing `quote` (doubled inside), and what follows.
fn quoted(text: &str, quote: char) -> Result<(String, &str), Error> {
    let mut body = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == quote {
            if chars.peek().is_some_and(|(_, next)| *next == quote) {
                chars.next();
                body.push(quote);
            } else {
                return Ok((body, &text[i + 1..]));
            }
        } else {
            body.push(c);
        }
    }
    Err(Error::Parse(format!("a {quote} is never closed")))
}

/// Where a name points: the `n`th field (from 1), or a field by name.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Position(usize),
    /// A name, and whether it was quoted (then its case counts).
    Name(String, bool),
    /// `[*]` or `[n]` in a JSON path.
    Index(Option<usize>),
}

/// A scalar function, by the name it was called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Concat,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

/// The types `CAST` converts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Int,
    Float,
    Decimal,
    String,
    Bool,
    Timestamp,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Literal(Value),
    /// A field of the record, by the path after the `FROM` alias (if it was named).
    Column(Vec<Step>),
    /// The whole record (`*`, or the alias alone).
    Record,
    Not(Box<Expr>),
    /// Terms joined by AND, kept flat so that a long chain nests no deeper.
    All(Vec<Expr>),
    /// Terms joined by OR.
    Any(Vec<Expr>),
    Negate(Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    IsNull(Box<Expr>, bool),
    Like {
        value: Box<Expr>,
        pattern: Box<Expr>,
        escape: Option<Box<Expr>>,
        negated: bool,
    },
    Between {
        value: Box<Expr>,
        low: Box<Expr>,
        high: Box<Expr>,
        negated: bool,
    },
    In {
        value: Box<Expr>,
        list: Vec<Expr>,
        negated: bool,
    },
    Case {
        operand: Option<Box<Expr>>,
        whens: Vec<(Expr, Expr)>,
        otherwise: Option<Box<Expr>>,
    },
    Cast(Box<Expr>, Type),
    /// A scalar function by its lower-case name; special forms (`SUBSTRING ... FROM`,
    /// `TRIM(LEADING ...)`, `EXTRACT(part FROM ...)`) arrive as their plain calls.
    Call(String, Vec<Expr>),
    /// A bare name: a projection's `AS` name if there is one, else a column by name.
    Name(String),
    /// An aggregate over every record that passes `WHERE`; `None` is `COUNT(*)`. `slot`
    /// numbers the aggregates of a query from 0, so that a copy made by an alias shares
    /// its original's result.
    Aggregate {
        kind: Aggregate,
        arg: Option<Box<Expr>>,
        slot: usize,
    },
}

/// One column of the projection, with the name `AS` gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct Projected {
    pub expr: Expr,
    pub alias: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// `None` for `SELECT *`.
    pub columns: Option<Vec<Projected>>,
    /// The path after `S3Object` in `FROM` (JSON: `S3Object[*].a.b`), without the `[*]`s.
    pub from: Vec<Step>,
    pub filter: Option<Expr>,
    pub limit: Option<u64>,
}

impl Query {
    /// Whether the query aggregates (then it answers one record for all).
    pub fn aggregates(&self) -> bool {
        self.columns
            .as_ref()
            .is_some_and(|columns| columns.iter().any(|c| contains_aggregate(&c.expr)))
    }
}

pub(crate) fn contains_aggregate(expr: &Expr) -> bool {
    let mut found = false;
    walk(expr, &mut |e| found |= matches!(e, Expr::Aggregate { .. }));
    found
}

/// Calls `visit` on `expr` and every expression inside it.
pub(crate) fn walk(expr: &Expr, visit: &mut dyn FnMut(&Expr)) {
    visit(expr);
    for child in children(expr) {
        walk(child, visit);
    }
}

/// How many expressions deep `expr` goes, itself counted.
pub(crate) fn height(expr: &Expr) -> usize {
    1 + children(expr).into_iter().map(height).max().unwrap_or(0)
}

/// The expressions directly inside `expr`, in the order they are written.
pub(crate) fn children(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::Literal(_) | Expr::Column(_) | Expr::Record | Expr::Name(_) => Vec::new(),
        Expr::Not(e) | Expr::Negate(e) | Expr::IsNull(e, _) | Expr::Cast(e, _) => vec![e],
        Expr::Binary(_, a, b) => vec![a, b],
        Expr::All(terms) | Expr::Any(terms) | Expr::Call(_, terms) => terms.iter().collect(),
        Expr::Like {
            value,
            pattern,
            escape,
            ..
        } => [Some(&**value), Some(&**pattern), escape.as_deref()]
            .into_iter()
            .flatten()
            .collect(),
        Expr::Between {
            value, low, high, ..
        } => vec![value, low, high],
        Expr::In { value, list, .. } => std::iter::once(&**value).chain(list).collect(),
        Expr::Case {
            operand,
            whens,
            otherwise,
        } => operand
            .as_deref()
            .into_iter()
            .chain(whens.iter().flat_map(|(when, then)| [when, then]))
            .chain(otherwise.as_deref())
            .collect(),
        Expr::Aggregate { arg, .. } => arg.as_deref().into_iter().collect(),
    }
}

/// Reads `text` as one S3 Select query.
pub fn parse(text: &str) -> Result<Query, Error> {
    let mut parser = Parser {
        tokens: tokens(text)?,
        at: 0,
        alias: None,
        depth: 0,
        slots: 0,
    };
    let query = parser.query()?;
    if parser.at < parser.tokens.len() {
        return Err(Error::Parse(format!(
            "unexpected {} after the query",
            parser.shown()
        )));
    }
    Ok(query)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    /// The name `FROM` gave the object (`S3Object` is always one).
    alias: Option<String>,
    depth: usize,
    /// Aggregates read so far.
    slots: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn shown(&self) -> String {
        match self.peek() {
            None => "end of query".into(),
            Some(Token::Word(w) | Token::Number(w)) => format!("'{w}'"),
            Some(Token::Quoted(q)) => format!("\"{q}\""),
            Some(Token::Text(t)) => format!("'{t}'"),
            Some(Token::Symbol(s)) => format!("'{s}'"),
        }
    }

    fn keyword(&mut self, word: &str) -> bool {
        let found = matches!(self.peek(), Some(Token::Word(w)) if w.eq_ignore_ascii_case(word));
        if found {
            self.at += 1;
        }
        found
    }

    fn expect_keyword(&mut self, word: &str) -> Result<(), Error> {
        if self.keyword(word) {
            Ok(())
        } else {
            Err(Error::Parse(format!(
                "expected {word} but found {}",
                self.shown()
            )))
        }
    }

    fn symbol(&mut self, symbol: &str) -> bool {
        let found = matches!(self.peek(), Some(Token::Symbol(s)) if *s == symbol);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, symbol: &str) -> Result<(), Error> {
        if self.symbol(symbol) {
            Ok(())
        } else {
            Err(Error::Parse(format!(
                "expected '{symbol}' but found {}",
                self.shown()
            )))
        }
    }

    fn query(&mut self) -> Result<Query, Error> {
        self.expect_keyword("select")?;
        if matches!(self.peek(), Some(Token::Word(w)) if w.eq_ignore_ascii_case("from")) {
            return Err(Error::Parse("SELECT names no column before FROM".into()));
        }
        // The FROM clause names the alias the projection may use: read it first.
        let start = self.at;
        let mut depth = 0usize;
        while let Some(token) = self.peek() {
            match token {
                Token::Symbol("(") => depth += 1,
                Token::Symbol(")") => depth = depth.saturating_sub(1),
                Token::Word(w) if depth == 0 && w.eq_ignore_ascii_case("from") => break,
                _ => {}
            }
            self.at += 1;
        }
        self.expect_keyword("from")?;
        let from = self.from()?;
        let after_from = self.at;
        self.at = start;
        let columns = if self.symbol("*") {
            None
        } else {
            let mut columns = vec![self.projected()?];
            while self.symbol(",") {
                columns.push(self.projected()?);
            }
            Some(columns)
        };
        self.expect_keyword("from")?;
        self.at = after_from;
        let filter = if self.keyword("where") {
            Some(self.expr()?)
        } else {
            None
        };
        let limit = if self.keyword("limit") {
            match self.tokens.get(self.at) {
                Some(Token::Number(n)) => {
                    let n = n
                        .parse()
                        .map_err(|_| Error::Parse(format!("LIMIT {n} is not a count")))?;
                    self.at += 1;
                    Some(n)
                }
                _ => {
                    return Err(Error::Parse(format!(
                        "LIMIT takes a count, not {}",
                        self.shown()
                    )))
                }
            }
        } else {
            None
        };
        self.symbol(";");
        let query = Query {
            columns,
            from,
            filter,
            limit,
        };
        if query.filter.as_ref().is_some_and(contains_aggregate) {
            return Err(Error::Parse("WHERE cannot hold an aggregate".into()));
        }
        Ok(query)
    }

    /// `S3Object[*].path [AS] alias`.
    fn from(&mut self) -> Result<Vec<Step>, Error> {
        match self.peek() {
            Some(Token::Word(w))
                if w.eq_ignore_ascii_case("s3object") || w.eq_ignore_ascii_case("stdin") =>
            {
                self.at += 1
            }
            _ => {
                return Err(Error::Parse(format!(
                    "FROM must name S3Object, not {}",
                    self.shown()
                )))
            }
        }
        let path = self.path_rest(Vec::new())?;
        let steps = names_only(path)?;
        self.keyword("as");
        if let Some(Token::Word(w)) = self.peek() {
            if !["where", "limit"].iter().any(|k| w.eq_ignore_ascii_case(k)) {
                self.alias = Some(w.to_ascii_lowercase());
                self.at += 1;
            }
        }
        Ok(steps)
    }

    /// Path steps after a name: `.name`, `."Name"`, `[*]`, `[n]`.
    fn path_rest(&mut self, mut steps: Vec<Step>) -> Result<Vec<Step>, Error> {
        loop {
            if steps.len() > PATH_STEPS_MAX {
                return Err(Error::Parse(format!(
                    "a path is at most {PATH_STEPS_MAX} steps long (JSON nests no deeper)"
                )));
            }
            if self.symbol(".") {
                match self.tokens.get(self.at).cloned() {
                    Some(Token::Word(w)) => steps.push(name_step(&w, false)),
                    Some(Token::Quoted(q)) => steps.push(Step::Name(q, true)),
                    Some(Token::Symbol("*")) => steps.push(Step::Index(None)),
                    _ => {
                        return Err(Error::Parse(format!(
                            "expected a name after '.', found {}",
                            self.shown()
                        )))
                    }
                }
                self.at += 1;
            } else if self.symbol("[") {
                let step = match self.tokens.get(self.at).cloned() {
                    Some(Token::Symbol("*")) => Step::Index(None),
                    Some(Token::Number(n)) => Step::Index(Some(
                        n.parse()
                            .map_err(|_| Error::Parse(format!("[{n}] is not an index")))?,
                    )),
                    _ => {
                        return Err(Error::Parse(format!(
                            "expected * or an index in [], found {}",
                            self.shown()
                        )))
                    }
                };
                self.at += 1;
                self.expect("]")?;
                steps.push(step);
            } else {
                return Ok(steps);
            }
        }
    }

    fn projected(&mut self) -> Result<Projected, Error> {
        let expr = self.expr()?;
        let alias = if self.keyword("as") {
            Some(self.name()?)
        } else {
            match self.peek() {
                Some(Token::Word(w)) if !w.eq_ignore_ascii_case("from") => Some(self.name()?),
                Some(Token::Quoted(_)) => Some(self.name()?),
                _ => None,
            }
        };
        Ok(Projected { expr, alias })
    }

    fn name(&mut self) -> Result<String, Error> {
        match self.tokens.get(self.at).cloned() {
            Some(Token::Word(w)) => {
                self.at += 1;
                Ok(w)
            }
            Some(Token::Quoted(q)) => {
                self.at += 1;
                Ok(q)
            }
            _ => Err(Error::Parse(format!(
                "expected a name, found {}",
                self.shown()
            ))),
        }
    }

    /// An expression, refused when its tree is taller than [`DEPTH_MAX`]. The parser's own
    /// nesting is given back as each operator chain ends, so a parenthesised operand's
    /// height would not be charged to the chain after it; measured here, every expression
    /// returned is at most that tall, and one being built a few times that (each chain of
    /// one precedence level counts again, above one parenthesised operand).
    fn expr(&mut self) -> Result<Expr, Error> {
        let expr = self.nested(Self::or)?;
        if height(&expr) > DEPTH_MAX {
            return Err(Error::Parse(format!(
                "the query nests deeper than {DEPTH_MAX}"
            )));
        }
        Ok(expr)
    }

    /// One more operator in a chain (`a + b + c` nests to the left): one level deeper.
    fn link(&mut self, links: &mut usize) -> Result<(), Error> {
        *links += 1;
        self.depth += 1;
        if self.depth > DEPTH_MAX {
            return Err(Error::Parse(format!(
                "the query nests deeper than {DEPTH_MAX}"
            )));
        }
        Ok(())
    }

    /// Reads with `read` one level deeper, refusing a query that nests past [`DEPTH_MAX`].
    fn nested(&mut self, read: fn(&mut Self) -> Result<Expr, Error>) -> Result<Expr, Error> {
        self.depth += 1;
        if self.depth > DEPTH_MAX {
            return Err(Error::Parse(format!(
                "the query nests deeper than {DEPTH_MAX}"
            )));
        }
        let expr = read(self);
        self.depth -= 1;
        expr
    }

    fn or(&mut self) -> Result<Expr, Error> {
        let mut terms = vec![self.and()?];
        while self.keyword("or") {
            terms.push(self.and()?);
        }
        Ok(match terms.len() {
            1 => terms.remove(0),
            _ => Expr::Any(terms),
        })
    }

    fn and(&mut self) -> Result<Expr, Error> {
        let mut terms = vec![self.not()?];
        while self.keyword("and") {
            terms.push(self.not()?);
        }
        Ok(match terms.len() {
            1 => terms.remove(0),
            _ => Expr::All(terms),
        })
    }

    fn not(&mut self) -> Result<Expr, Error> {
        if self.keyword("not") {
            return Ok(Expr::Not(Box::new(self.nested(Self::not)?)));
        }
        self.comparison()
    }

    /// Comparisons chain left to right (`a = b = true` is `(a = b) = true`).
    fn comparison(&mut self) -> Result<Expr, Error> {
        let mut left = self.concat()?;
        let mut links = 0;
        loop {
            self.link(&mut links)?;
            match self.compared(left)? {
                Ok(compared) => left = compared,
                Err(left) => {
                    self.depth -= links;
                    return Ok(left);
                }
            }
        }
    }

    /// `left` compared by the operator that follows, or `left` back when none does.
    fn compared(&mut self, left: Expr) -> Result<Result<Expr, Expr>, Error> {
        let ops = [
            ("=", BinaryOp::Eq),
            ("<>", BinaryOp::Ne),
            ("!=", BinaryOp::Ne),
            ("<=", BinaryOp::Le),
            (">=", BinaryOp::Ge),
            ("<", BinaryOp::Lt),
            (">", BinaryOp::Gt),
        ];
        for (symbol, op) in ops {
            if self.symbol(symbol) {
                return Ok(Ok(binary(op, left, self.concat()?)));
            }
        }
        if self.keyword("is") {
            let negated = self.keyword("not");
            if self.keyword("null") || self.keyword("missing") {
                return Ok(Ok(Expr::IsNull(Box::new(left), negated)));
            }
            return Err(Error::Parse(format!(
                "expected NULL after IS, found {}",
                self.shown()
            )));
        }
        let negated = self.keyword("not");
        if self.keyword("like") {
            let pattern = self.concat()?;
            let escape = if self.keyword("escape") {
                Some(Box::new(self.concat()?))
            } else {
                None
            };
            return Ok(Ok(Expr::Like {
                value: Box::new(left),
                pattern: Box::new(pattern),
                escape,
                negated,
            }));
        }
        if self.keyword("between") {
            let low = self.concat()?;
            self.expect_keyword("and")?;
            let high = self.concat()?;
            return Ok(Ok(Expr::Between {
                value: Box::new(left),
                low: Box::new(low),
                high: Box::new(high),
                negated,
            }));
        }
        if self.keyword("in") {
            self.expect("(")?;
            let mut list = vec![self.expr()?];
            while self.symbol(",") {
                list.push(self.expr()?);
            }
            self.expect(")")?;
            return Ok(Ok(Expr::In {
                value: Box::new(left),
                list,
                negated,
            }));
        }
        if negated {
            return Err(Error::Parse(format!(
                "expected LIKE, BETWEEN or IN after NOT, found {}",
                self.shown()
            )));
        }
        Ok(Err(left))
    }

    fn concat(&mut self) -> Result<Expr, Error> {
        let mut left = self.additive()?;
        let mut links = 0;
        while self.symbol("||") {
            self.link(&mut links)?;
            left = binary(BinaryOp::Concat, left, self.additive()?);
        }
        self.depth -= links;
        Ok(left)
    }

    fn additive(&mut self) -> Result<Expr, Error> {
        let mut left = self.multiplicative()?;
        let mut links = 0;
        loop {
            self.link(&mut links)?;
            if self.symbol("+") {
                left = binary(BinaryOp::Add, left, self.multiplicative()?);
            } else if self.symbol("-") {
                left = binary(BinaryOp::Sub, left, self.multiplicative()?);
            } else {
                self.depth -= links;
                return Ok(left);
            }
        }
    }

    fn multiplicative(&mut self) -> Result<Expr, Error> {
        let mut left = self.unary()?;
        let mut links = 0;
        loop {
            self.link(&mut links)?;
            let op = if self.symbol("*") {
                BinaryOp::Mul
            } else if self.symbol("/") {
                BinaryOp::Div
            } else if self.symbol("%") {
                BinaryOp::Mod
            } else {
                self.depth -= links;
                return Ok(left);
            };
            left = binary(op, left, self.unary()?);
        }
    }

    fn unary(&mut self) -> Result<Expr, Error> {
        if self.symbol("-") {
            return Ok(match self.nested(Self::unary)? {
                Expr::Literal(Value::Int(n)) => Expr::Literal(Value::Int(-n)),
                Expr::Literal(Value::Float(f)) => Expr::Literal(Value::Float(-f)),
                other => Expr::Negate(Box::new(other)),
            });
        }
        if self.symbol("+") {
            return self.nested(Self::unary);
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr, Error> {
        let Some(token) = self.tokens.get(self.at).cloned() else {
            return Err(Error::Parse("the query ends too early".into()));
        };
        self.at += 1;
        match token {
            Token::Number(n) => number(&n),
            Token::Text(t) => Ok(Expr::Literal(Value::Str(t))),
            Token::Symbol("(") => {
                let inner = self.expr()?;
                self.expect(")")?;
                Ok(inner)
            }
            Token::Symbol("*") => Ok(Expr::Record),
            Token::Quoted(q) => Ok(Expr::Column(self.path_rest(vec![Step::Name(q, true)])?)),
            Token::Word(w) => self.word(&w),
            Token::Symbol(s) => Err(Error::Parse(format!("unexpected '{s}'"))),
        }
    }

    fn word(&mut self, word: &str) -> Result<Expr, Error> {
        let lower = word.to_ascii_lowercase();
        match lower.as_str() {
            "null" | "missing" => return Ok(Expr::Literal(Value::Null)),
            "true" => return Ok(Expr::Literal(Value::Bool(true))),
            "false" => return Ok(Expr::Literal(Value::Bool(false))),
            "case" => return self.case(),
            _ => {}
        }
        if self.symbol("(") {
            return self.call(&lower);
        }
        // The FROM alias (or S3Object itself) before a path is the record.
        let is_alias = lower == "s3object" || self.alias.as_deref() == Some(lower.as_str());
        if is_alias {
            let steps = names_only(self.path_rest(Vec::new())?)?;
            return Ok(if steps.is_empty() {
                Expr::Record
            } else {
                Expr::Column(steps)
            });
        }
        let steps = self.path_rest(vec![name_step(word, false)])?;
        Ok(match steps.as_slice() {
            [Step::Name(name, false)] => Expr::Name(name.clone()),
            _ => Expr::Column(steps),
        })
    }

    fn case(&mut self) -> Result<Expr, Error> {
        let operand = if matches!(self.peek(), Some(Token::Word(w)) if w.eq_ignore_ascii_case("when"))
        {
            None
        } else {
            Some(Box::new(self.expr()?))
        };
        let mut whens = Vec::new();
        while self.keyword("when") {
            let when = self.expr()?;
            self.expect_keyword("then")?;
            whens.push((when, self.expr()?));
        }
        if whens.is_empty() {
            return Err(Error::Parse("CASE needs a WHEN".into()));
        }
        let otherwise = if self.keyword("else") {
            Some(Box::new(self.expr()?))
        } else {
            None
        };
        self.expect_keyword("end")?;
        Ok(Expr::Case {
            operand,
            whens,
            otherwise,
        })
    }

    /// A call after its `(`.
    fn call(&mut self, name: &str) -> Result<Expr, Error> {
        let aggregate = match name {
            "count" => Some(Aggregate::Count),
            "sum" => Some(Aggregate::Sum),
            "min" => Some(Aggregate::Min),
            "max" => Some(Aggregate::Max),
            "avg" => Some(Aggregate::Avg),
            _ => None,
        };
        if let Some(kind) = aggregate {
            let arg = if kind == Aggregate::Count && self.symbol("*") {
                None
            } else {
                let arg = self.expr()?;
                if contains_aggregate(&arg) {
                    return Err(Error::Parse(format!("{name}() cannot hold an aggregate")));
                }
                Some(Box::new(arg))
            };
            self.expect(")")?;
            self.slots += 1;
            return Ok(Expr::Aggregate {
                kind,
                arg,
                slot: self.slots - 1,
            });
        }
        let args = match name {
            "cast" => {
                let value = self.expr()?;
                self.expect_keyword("as")?;
                let ty = self.type_name()?;
                self.expect(")")?;
                return Ok(Expr::Cast(Box::new(value), ty));
            }
            "substring" => {
                let value = self.expr()?;
                let mut args = vec![value];
                if self.keyword("from") || self.symbol(",") {
                    args.push(self.expr()?);
                    if self.keyword("for") || self.symbol(",") {
                        args.push(self.expr()?);
                    }
                }
                args
            }
            "trim" => {
                let side = ["leading", "trailing", "both"]
                    .into_iter()
                    .find(|side| self.keyword(side));
                let side = Expr::Literal(Value::Str(side.unwrap_or("both").into()));
                if self.keyword("from") {
                    vec![side, self.expr()?]
                } else {
                    let first = self.expr()?;
                    if self.keyword("from") {
                        vec![side, self.expr()?, first]
                    } else {
                        vec![side, first]
                    }
                }
            }
            "extract" => {
                let part = self.name()?.to_ascii_lowercase();
                self.expect_keyword("from")?;
                vec![Expr::Literal(Value::Str(part)), self.expr()?]
            }
            "date_add" | "date_diff" => {
                let part = self.name()?.to_ascii_lowercase();
                let mut args = vec![Expr::Literal(Value::Str(part))];
                while self.symbol(",") {
                    args.push(self.expr()?);
                }
                args
            }
            _ => {
                let mut args = Vec::new();
                if !matches!(self.peek(), Some(Token::Symbol(")"))) {
                    args.push(self.expr()?);
                    while self.symbol(",") {
                        args.push(self.expr()?);
                    }
                }
                args
            }
        };
        self.expect(")")?;
        Ok(Expr::Call(name.to_owned(), args))
    }

    fn type_name(&mut self) -> Result<Type, Error> {
        let name = self.name()?.to_ascii_lowercase();
        let ty = match name.as_str() {
            "int" | "integer" | "bigint" | "smallint" => Type::Int,
            "float" | "real" | "double" => Type::Float,
            "decimal" | "numeric" => Type::Decimal,
            "string" | "varchar" | "char" => Type::String,
            "bool" | "boolean" => Type::Bool,
            "timestamp" => Type::Timestamp,
            _ => return Err(Error::Parse(format!("CAST to an unknown type {name}"))),
        };
        // DECIMAL(p, s) and VARCHAR(n): the bounds change nothing here.
        if self.symbol("(") {
            while !self.symbol(")") {
                if self.peek().is_none() {
                    return Err(Error::Parse("a type's ( is never closed".into()));
                }
                self.at += 1;
            }
        }
        Ok(ty)
    }
}

/// A path after `S3Object` or its alias: `[*]` may open it (`S3Object[*].a`) and close it
/// (`S3Object[*].a[*]`, each element a record); anything else but names is refused.
fn names_only(mut steps: Vec<Step>) -> Result<Vec<Step>, Error> {
    if steps.first() == Some(&Step::Index(None)) {
        steps.remove(0);
    }
    if steps.last() == Some(&Step::Index(None)) {
        steps.pop();
    }
    if steps.iter().any(|s| matches!(s, Step::Index(_))) {
        return Err(Error::Parse(
            "a path after S3Object may only open and close with [*]; [n] and a [*] between names are not served".into(),
        ));
    }
    Ok(steps)
}

fn binary(op: BinaryOp, left: Expr, right: Expr) -> Expr {
    Expr::Binary(op, Box::new(left), Box::new(right))
}

/// `_3` is the third field; any other name is looked up by name.
fn name_step(word: &str, quoted: bool) -> Step {
    match word.strip_prefix('_').map(str::parse::<usize>) {
        Some(Ok(n)) if n > 0 && !quoted => Step::Position(n),
        _ => Step::Name(word.to_owned(), quoted),
    }
}

fn number(text: &str) -> Result<Expr, Error> {
    let bad = || Error::Parse(format!("{text} is not a number"));
    if text.contains(['.', 'e', 'E']) {
        text.parse()
            .map(|f| Expr::Literal(Value::Float(f)))
            .map_err(|_| bad())
    } else {
        match text.parse() {
            Ok(n) => Ok(Expr::Literal(Value::Int(n))),
            Err(_) => text
                .parse()
                .map(|f| Expr::Literal(Value::Float(f)))
                .map_err(|_| bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(n: usize) -> Expr {
        Expr::Column(vec![Step::Position(n)])
    }

    #[test]
    fn precedence_binds_products_before_sums_and_and_before_or() {
        let query = parse("select _1 + _2 * 3 from s3object where _1 = 1 or _2 = 2 and _3 = 3;")
            .expect("parses");
        let columns = query.columns.expect("columns");
        assert_eq!(
            columns[0].expr,
            binary(
                BinaryOp::Add,
                column(1),
                binary(BinaryOp::Mul, column(2), Expr::Literal(Value::Int(3)))
            )
        );
        let Some(Expr::Any(terms)) = query.filter else {
            panic!("OR at the top");
        };
        assert!(matches!(
            terms.as_slice(),
            [Expr::Binary(BinaryOp::Eq, _, _), Expr::All(_)]
        ));
    }

    #[test]
    fn the_from_alias_names_the_record_and_keywords_take_any_case() {
        let query = parse("SELECT s._2, S3OBJECT._1 As x FROM S3Object s LIMIT 5").expect("parses");
        let columns = query.columns.expect("columns");
        assert_eq!(columns[0].expr, column(2));
        assert_eq!(columns[1].expr, column(1));
        assert_eq!(columns[1].alias.as_deref(), Some("x"));
        assert_eq!(query.limit, Some(5));
    }

    #[test]
    fn json_paths_and_special_forms_read() {
        let query = parse(
            "select count(*), sum(cast(_1.a as int)) from s3object[*].root where substring(\"Name\" from 2 for 3) like 'a%' escape '\\'",
        )
        .expect("parses");
        assert_eq!(query.from, vec![Step::Name("root".into(), false)]);
        assert_eq!(
            parse("select 1.5e3, 2E-1, 7e from s3object")
                .expect("parses")
                .columns
                .expect("columns")[..2]
                .iter()
                .map(|c| c.expr.clone())
                .collect::<Vec<_>>(),
            [
                Expr::Literal(Value::Float(1500.0)),
                Expr::Literal(Value::Float(0.2))
            ]
        );
        for path in ["s3object[*].a[0]", "s3object[*].a[*].b", "s3object[1]"] {
            assert!(parse(&format!("select * from {path}")).is_err(), "{path}");
        }
        let ors = (0..2000)
            .map(|i| format!("_1 = {i}"))
            .collect::<Vec<_>>()
            .join(" or ");
        assert!(parse(&format!("select * from s3object where {ors}")).is_ok());
        assert!(query.aggregates());
        let Some(Expr::Like { value, .. }) = query.filter else {
            panic!("a LIKE");
        };
        assert!(
            matches!(*value, Expr::Call(ref name, ref args) if name == "substring" && args.len() == 3)
        );
    }

    #[test]
    fn malformed_queries_are_refused_with_a_reason() {
        for bad in [
            "select from s3object",
            "select _1 from table",
            "select _1 from s3object where",
            "select _1 from s3object where count(*) > 1",
            "select 'abc from s3object",
            "select _1 from s3object limit x",
            "select cast(_1 as blob) from s3object",
            "select _1 from s3object s t",
        ] {
            assert!(
                matches!(parse(bad), Err(Error::Parse(_))),
                "{bad} is refused"
            );
        }
        let deep = format!(
            "select {}1{} from s3object",
            "(".repeat(500),
            ")".repeat(500)
        );
        assert!(parse(&deep).is_err());
        let negated = format!("select {}1 from s3object", "-".repeat(500));
        assert!(parse(&negated).is_err());
        // Each parenthesised chain is shallow for the parser, the tree they make is tall:
        // refused on a thread of the blocking pool's size, even unoptimised.
        let tall = |levels: usize, links: usize| {
            (0..levels).fold("1".to_owned(), |inner, _| {
                format!("({inner}{})", "+1".repeat(links))
            })
        };
        let refused = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || parse(&format!("select {} from s3object", tall(30, 50))).is_err())
            .expect("a thread")
            .join()
            .expect("no overflow");
        assert!(refused);
        let query = parse(&format!("select {} from s3object", tall(3, 20))).expect("parses");
        assert!(height(&query.columns.expect("columns")[0].expr) > 60);
    }
}
