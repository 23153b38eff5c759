import type { Page } from '../types.js';

/**
 * What a list call returns: await it for every item as one array (all pages fetched), or iterate it with
 * `for await` to fetch pages as you go; `firstPage()` and `pages()` give the pages themselves.
 *
 *     const topics = await pq.topics.list();            // Topic[]
 *     for await (const topic of pq.topics.list()) {}    // page by page, lazily
 */
export class PagedList<T> implements PromiseLike<T[]>, AsyncIterable<T> {
  private all: Promise<T[]> | undefined;

  constructor(
    private readonly fetchPage: (cursor: string | undefined) => Promise<Page<T>>,
    private readonly startCursor?: string,
  ) {}

  /** The first page only (`data` and `nextCursor`). */
  firstPage(): Promise<Page<T>> {
    return this.fetchPage(this.startCursor);
  }

  /** Every page, fetched one after the other as the loop asks. */
  async *pages(): AsyncGenerator<Page<T>, void, undefined> {
    let cursor = this.startCursor;
    const seen = new Set<string>();
    for (;;) {
      const page = await this.fetchPage(cursor);
      yield page;
      const next = page.nextCursor;
      if (!next || seen.has(next)) return;
      seen.add(next);
      cursor = next;
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T, void, undefined> {
    for await (const page of this.pages()) yield* page.data;
  }

  /** Every item of every page. */
  toArray(): Promise<T[]> {
    if (!this.all) {
      this.all = (async () => {
        const items: T[] = [];
        for await (const item of this) items.push(item);
        return items;
      })();
    }
    return this.all;
  }

  then<R1 = T[], R2 = never>(
    onfulfilled?: ((value: T[]) => R1 | PromiseLike<R1>) | null,
    onrejected?: ((reason: unknown) => R2 | PromiseLike<R2>) | null,
  ): Promise<R1 | R2> {
    return this.toArray().then(onfulfilled, onrejected);
  }

  catch<R = never>(onrejected?: ((reason: unknown) => R | PromiseLike<R>) | null): Promise<T[] | R> {
    return this.toArray().catch(onrejected);
  }
}
