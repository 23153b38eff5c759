import type { APIClient } from './api-client.js';

export abstract class APIResource {
  protected readonly client: APIClient;
  constructor(client: APIClient) {
    this.client = client;
  }
}
