import { seg, expectObject } from '../core/api-client.js';
import { PagedList } from '../core/pagination.js';
import { APIResource } from '../core/resource.js';
import type { ListParams, Page, RequestOptions, Schedule, ScheduleCreateParams, ScheduleRun } from '../types.js';

/** Schedules: a message published to a topic on a cron expression or a fixed period, once per due time. */
export class Schedules extends APIResource {
  /**
   * Create a schedule: `{topic, cron | every, timezone = 'UTC', data, key, headers}` (exactly one of `cron`
   * and `every`).
   */
  create(params: ScheduleCreateParams, options?: RequestOptions): Promise<Schedule> {
    return this.client.requestObject<Schedule>({ method: 'POST', path: '/v1/schedules', body: params, ...options });
  }

  /** Every schedule of the key's environment: `await` it for an array, or `for await` it page by page. */
  list(params: ListParams = {}, options?: RequestOptions): PagedList<Schedule> {
    return new PagedList(async (cursor) => {
      const response = await this.client.request<unknown>({
        method: 'GET',
        path: '/v1/schedules',
        query: { limit: params.limit, cursor },
        ...options,
      });
      const page = expectObject<Page<Schedule>>(response);
      return { data: page.data ?? [], nextCursor: page.nextCursor ?? null };
    }, params.cursor);
  }

  /** One schedule (`NotFoundError`, code `NOT_FOUND`, when there is none of this id). */
  get(id: string, options?: RequestOptions): Promise<Schedule> {
    return this.client.requestObject<Schedule>({ method: 'GET', path: `/v1/schedules/${seg(id)}`, ...options });
  }

  /** Stop publishing runs until resumed (`status: 'paused'`). */
  pause(id: string, options?: RequestOptions): Promise<Schedule> {
    return this.client.requestObject<Schedule>({ method: 'POST', path: `/v1/schedules/${seg(id)}/pause`, ...options });
  }

  /** Publish again from the first due time after now (`status: 'active'`). */
  resume(id: string, options?: RequestOptions): Promise<Schedule> {
    return this.client.requestObject<Schedule>({ method: 'POST', path: `/v1/schedules/${seg(id)}/resume`, ...options });
  }

  /** Delete a schedule (the messages it published stay in the topic). */
  async delete(id: string, options?: RequestOptions): Promise<void> {
    await this.client.request({ method: 'DELETE', path: `/v1/schedules/${seg(id)}`, ...options });
  }

  /** The schedule's last runs, newest first. */
  async runs(id: string, options?: RequestOptions): Promise<ScheduleRun[]> {
    const answer = await this.client.requestObject<{ data: ScheduleRun[] }>({
      method: 'GET',
      path: `/v1/schedules/${seg(id)}/runs`,
      ...options,
    });
    return answer.data ?? [];
  }
}
