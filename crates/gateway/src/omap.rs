//! Reading an omap a page at a time.

use client::Pool;

use crate::Error;

/// Omap entries read per request.
pub const PAGE: u32 = 1000;

/// The omap of one object, page by page; a missing object has no entries.
pub struct Pages<'a> {
    pool: &'a Pool,
    object: &'a str,
    after: Option<Vec<u8>>,
    done: bool,
}

impl<'a> Pages<'a> {
    /// The entries of `object` after `after`.
    pub fn new(pool: &'a Pool, object: &'a str, after: Option<Vec<u8>>) -> Pages<'a> {
        Pages {
            pool,
            object,
            after,
            done: false,
        }
    }

    pub async fn next(&mut self) -> Result<Option<Vec<(Vec<u8>, Vec<u8>)>>, Error> {
        if self.done {
            return Ok(None);
        }
        let (page, more) = match self
            .pool
            .omap_list(self.object, self.after.clone(), PAGE)
            .await
        {
            Ok(listed) => listed,
            Err(client::Error::NotFound) => (Vec::new(), false),
            Err(e) => return Err(e.into()),
        };
        self.done = !more;
        self.after = page.last().map(|(key, _)| key.clone());
        Ok((!page.is_empty()).then_some(page))
    }
}
